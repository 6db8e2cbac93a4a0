"""The ``"dlinfer"`` attention implementation and its mask function.

The mask function is how the batch's padding reaches the cache: transformers calls it once per forward, before
the decoder layers, with the 2-D attention mask; it builds the step's context (:meth:`PagedCache.prepare_step`)
from the new tokens' columns of that mask and hands the context to every layer as ``attention_mask``. The
attention function then packs the real tokens, writes them to the cache (``fill_kv_cache``) and runs
``prefill_attention``, ``paged_prefill_attention`` (cached tokens before a multi-token step) or
``paged_decode_attention``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

import dlinfer.ops as ops

from .compat import get_cache
from .context import StepContext
from .paged_cache import PagedCache

__all__ = ["ATTENTION_NAME", "active_cache", "dlinfer_attention", "dlinfer_mask", "pop_cache", "push_cache",
           "reset_active"]

ATTENTION_NAME = "dlinfer"
_ACTIVE: list[PagedCache] = []


def push_cache(cache: PagedCache) -> None:
    """Make ``cache`` the one the mask function prepares (a forward of an installed model begins)."""
    cache.begin_forward()
    _ACTIVE.append(cache)


def pop_cache(cache: PagedCache) -> None:
    """The forward that pushed ``cache`` ended."""
    if _ACTIVE and _ACTIVE[-1] is cache:
        _ACTIVE.pop()


def active_cache() -> PagedCache | None:
    """The cache of the innermost running forward of an installed model, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def dlinfer_mask(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: int = 0,
                 mask_function: Any = None, attention_mask: Tensor | None = None, **kwargs: Any) -> Any:
    """transformers' mask interface: build the step's context from the 2-D padding mask (its last ``q_length``
    columns are the new tokens) and return it; without an installed model's cache, return the mask as given."""
    cache = active_cache()
    if cache is None:
        return attention_mask
    token_mask = None
    if attention_mask is not None:
        if attention_mask.ndim != 2:
            raise ValueError(f"dlinfer attention takes a 2-D padding mask, got shape {tuple(attention_mask.shape)}")
        token_mask = attention_mask[:, -q_length:]
    return cache.prepare_step(q_length, token_mask)


def _packed(x: Tensor, ctx: StepContext) -> Tensor:
    """``(batch, heads, q_len, dim)`` -> token-packed ``(tokens, heads, dim)`` (real tokens only)."""
    flat = x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])
    return flat if ctx.token_index is None else flat.index_select(0, ctx.token_index)


def dlinfer_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                      scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention interface over :class:`PagedCache` (passed as ``cache``, or
    ``past_key_values`` before transformers 5.24): returns ``((batch, q_len, num_q_heads, head_dim), None)``;
    padding positions get zeros."""
    cache = get_cache(kwargs)
    if not isinstance(cache, PagedCache):
        raise RuntimeError("dlinfer attention needs a PagedCache as the cache (install the model with"
                           " dlinfer.framework.transformers.install(model))")
    batch, num_q_heads, q_len, head_dim = query.shape
    num_kv_heads = key.shape[1]
    ctx = attention_mask if isinstance(attention_mask, StepContext) else cache.step_context(q_len)
    key_cache, value_cache, quant = cache.layer_pools(module.layer_idx)
    bits = cache.kv_quant_bits
    q, k, v = _packed(query, ctx), _packed(key, ctx), _packed(value, ctx)
    if quant is None:
        ops.fill_kv_cache(k, v, key_cache, value_cache, ctx.kv_indices)
        scales = zeros = None
    else:
        k_scale, k_zero, v_scale, v_zero = quant
        ops.fill_kv_cache(k, v, key_cache, value_cache, ctx.kv_indices, k_scales_zeros=(k_scale, k_zero),
                          v_scales_zeros=(v_scale, v_zero), quant_bits=bits)
        scales, zeros = (k_scale, v_scale), (k_zero, v_zero)
    if ctx.is_decoding:
        out = ops.paged_decode_attention(q, key_cache, value_cache, ctx.block_table, cache.block_size,
                                         ctx.kv_seq_len, ctx.max_kv_seq_len, num_q_heads, num_kv_heads,
                                         softmax_scale=scaling, kv_scales=scales, kv_zeros=zeros, quant_bits=bits)
    elif ctx.has_past:
        out = ops.paged_prefill_attention(q, k, v, key_cache, value_cache, ctx.block_table, cache.block_size,
                                          ctx.q_start_loc, ctx.q_seq_len, ctx.kv_seq_len, ctx.max_q_seq_len,
                                          num_q_heads, num_kv_heads, softmax_scale=scaling, kv_scales=scales,
                                          kv_zeros=zeros, quant_bits=bits)
    else:
        out = ops.prefill_attention(q, k, v, ctx.q_start_loc, ctx.q_seq_len, ctx.max_q_seq_len, num_q_heads,
                                    num_kv_heads, softmax_scale=scaling)
    if ctx.token_index is not None:
        full = out.new_zeros((batch * q_len, num_q_heads, out.shape[-1]))
        out = full.index_copy(0, ctx.token_index, out)
    return out.reshape(batch, q_len, num_q_heads, -1), None


def reset_active() -> None:
    """Forget every pushed cache (after an error left some behind)."""
    _ACTIVE.clear()

