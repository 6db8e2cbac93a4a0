"""The ``"dlinfer"`` attention implementation: transformers' attention interface over the paged cache.

Every attention module that calls ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`` reaches
:func:`dlinfer_attention`, whether the adaptor replaced the module or not (a stock module first hands its new keys
and values to ``PagedCache.update``, which gives them back unchanged). The function packs the real (non-padding)
tokens, writes them to the layer's pools (``fill_kv_cache``) and runs ``prefill_attention``,
``paged_prefill_attention`` (cached tokens before a multi-token step) or ``paged_decode_attention``.

What it honours of what stock passes: ``scaling``, the sliding window (the mask kind's, see ``mask.py``; else the
``sliding_window`` keyword or ``module.sliding_window``), ``softcap`` (tanh soft-capping of the scores), ``dropout``
(0 in eval). What it refuses, one line naming the module: attention sinks (``s_aux``), a non-causal module
(``is_causal=False``), a value head_dim other than the key's, keys that are not the step's new tokens, a 4-D mask
built outside the mask interface, any other keyword with a value (it might change the result).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

import dlinfer.ops  # noqa: F401 - defines torch.ops.dlinfer
from dlinfer.ops.library import call

from .compat import get_cache
from .context import StepContext
from .paged_cache import PagedCache

__all__ = ["ATTENTION_NAME", "active_cache", "attend_tokens", "dlinfer_attention", "layer_context", "pop_cache",
           "push_cache", "token_rotary", "unpacked"]

ATTENTION_NAME = "dlinfer"
_FILL = torch.ops.dlinfer.fill_kv_cache
_PREFILL = torch.ops.dlinfer.prefill_attention
_PAGED_PREFILL = torch.ops.dlinfer.paged_prefill_attention
_DECODE = torch.ops.dlinfer.paged_decode_attention
_ACTIVE: list[tuple[int, PagedCache]] = []  # (id of the module whose forward pushed it, cache), innermost last

#: keywords stock passes that do not change the attention's result (generation bookkeeping, outputs requested)
_IGNORED = frozenset({"cache", "past_key_values", "position_ids", "use_cache", "cache_position", "output_attentions",
                      "output_hidden_states", "output_router_logits", "return_dict", "num_items_in_batch",
                      "max_length_q", "max_length_k", "layer_idx", "sliding_window", "softcap", "s_aux",
                      "is_causal", "position_embeddings", "logits_to_keep"})


def push_cache(cache: PagedCache, owner: object = None) -> None:
    """Make ``cache`` the one the mask and attention functions use (a forward of ``owner`` begins). An entry
    ``owner`` left behind (its forward raised, so its exit hook did not run) is dropped."""
    key = id(owner)
    _ACTIVE[:] = [entry for entry in _ACTIVE if entry[0] != key]
    cache.begin_forward()
    _ACTIVE.append((key, cache))


def pop_cache(cache: PagedCache) -> None:
    """The forward that pushed ``cache`` ended."""
    if _ACTIVE and _ACTIVE[-1][1] is cache:
        _ACTIVE.pop()


def active_cache() -> PagedCache | None:
    """The cache of the innermost running forward of an installed model, if any."""
    return _ACTIVE[-1][1] if _ACTIVE else None


def _check_keywords(name: str, module: nn.Module, dropout: float, kwargs: dict[str, Any]) -> None:
    """One-line ``ValueError`` for what stock asks that the paged attention would silently not do."""
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"dlinfer attention: {name} passes attention sinks (s_aux), unsupported by the paged"
                         " attention")
    if kwargs.get("is_causal") is False or getattr(module, "is_causal", True) is False:
        raise ValueError(f"dlinfer attention: {name}.is_causal is False (bidirectional attention), unsupported by the"
                         " paged attention")
    if dropout and module.training:
        raise ValueError(f"dlinfer attention: {name} asks for dropout {dropout} (training mode); inference only")
    for key, value in kwargs.items():
        if key not in _IGNORED and value is not None:
            raise ValueError(f"dlinfer attention: {name} passes {key}={type(value).__name__}, which the paged attention"
                             " does not honour")


def _context_and_window(attention_mask: Any, cache: PagedCache, q_len: int, name: str, module: nn.Module,
                        kwargs: dict[str, Any]) -> tuple[StepContext, int | None]:
    if isinstance(attention_mask, StepContext) and attention_mask.mask_judged:
        if attention_mask.mask_problem:
            raise ValueError(attention_mask.mask_problem)
        return attention_mask, attention_mask.window
    if isinstance(attention_mask, Tensor):
        raise ValueError(f"dlinfer attention: {name} got a {attention_mask.ndim}-D tensor mask built outside"
                         " transformers' mask interface; unsupported by the paged attention")
    ctx = attention_mask if isinstance(attention_mask, StepContext) else cache.step_context(q_len)
    window = kwargs.get("sliding_window")
    return ctx, window if window is not None else getattr(module, "sliding_window", None)


def _with_cache_window(name: str, ctx: StepContext, window: int | None, kept: int | None) -> int | None:
    """The window stock's cache imposes on top of the mask's: a sliding cache layer keeps the last ``kept - 1``
    tokens, so a decode step sees ``kept`` keys at most; a first prefill sees every prompt token (the mask
    decides). A multi-token step after cached ones would see a truncated past: refused unless the mask's window
    is the same."""
    if kept is None or ctx.max_kv_seq_len <= kept or (window is not None and window <= kept):
        return window
    if ctx.is_decoding:
        return kept
    if ctx.has_past:
        raise ValueError(f"dlinfer attention: {name} continues a prompt past a cache that keeps {kept - 1} tokens"
                         " under a mask without that window; unsupported by the paged attention")
    return window


def _claim(name: str, cache: PagedCache, layer: int) -> None:
    """Refuse a second attention call for ``layer`` in one forward (it would write the step's keys twice)."""
    if layer in cache.attended:
        raise ValueError(f"dlinfer attention: {name} calls the attention function more than once for layer {layer}"
                         " (one cache write per layer and step); unsupported by the paged cache")


def _packed(x: Tensor, ctx: StepContext) -> Tensor:
    """``(batch, heads, q_len, dim)`` -> token-packed ``(tokens, heads, dim)`` (real tokens only)."""
    flat = x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])
    return flat if ctx.token_index is None else flat.index_select(0, ctx.token_index)


def attend_tokens(name: str, query: Tensor, key: Tensor, value: Tensor, ctx: StepContext, cache: PagedCache,
                  layer: int, scaling: float | None, window: int | None, softcap: float | None) -> Tensor:
    """The paged attention of one layer and step on token-packed ``(tokens, heads, head_dim)`` query, key and
    value (the step's real tokens, in ``ctx``'s order): the keys and values are written to the layer's pools
    (``fill_kv_cache``), then ``prefill_attention``, ``paged_prefill_attention`` (cached tokens before a
    multi-token step) or ``paged_decode_attention`` runs; returns ``(tokens, num_q_heads, head_dim)``. The
    operators are called in their schema form (``torch.ops.dlinfer``, every argument positionally)."""
    num_q_heads, num_kv_heads, head_dim = query.shape[1], key.shape[1], key.shape[2]
    if cache.layer_windows:
        window = _with_cache_window(name, ctx, window, cache.layer_windows.get(layer))
    if window is not None:
        window = None if ctx.max_kv_seq_len <= window else int(window)  # None: no query of the step sees past it
    if softcap is not None:
        softcap = float(softcap)
    key_cache, value_cache, quant = cache.layer_pools(layer, num_kv_heads, head_dim)
    cache.written.add(layer)
    cache.attended.add(layer)
    bits = cache.kv_quant_bits
    k_scale, k_zero, v_scale, v_zero = (None, None, None, None) if quant is None else quant
    call(_FILL, key, value, key_cache, value_cache, ctx.kv_indices, k_scale, k_zero, v_scale, v_zero, bits)
    if ctx.is_decoding:
        return call(_DECODE, query, key_cache, value_cache, ctx.block_table, cache.block_size, ctx.kv_seq_len,
                    ctx.max_kv_seq_len, num_q_heads, num_kv_heads, scaling, None, k_scale, k_zero, v_scale, v_zero,
                    bits, window, softcap)
    if ctx.has_past:
        return call(_PAGED_PREFILL, query, key, value, key_cache, value_cache, ctx.block_table, cache.block_size,
                    ctx.q_start_loc, ctx.q_seq_len, ctx.kv_seq_len, ctx.max_q_seq_len, num_q_heads, num_kv_heads,
                    [], scaling, None, k_scale, k_zero, v_scale, v_zero, bits, ctx.max_kv_seq_len, window, softcap)
    return call(_PREFILL, query, key, value, ctx.q_start_loc, ctx.q_seq_len, ctx.max_q_seq_len, num_q_heads,
                num_kv_heads, [], scaling, None, window, softcap)


def unpacked(out: Tensor, ctx: StepContext) -> Tensor:
    """Token-packed ``(tokens, ...)`` -> ``(batch * q_len, ...)``; padding positions get zeros."""
    if ctx.token_index is None:
        return out
    return out.new_zeros((ctx.batch_size * ctx.q_len, *out.shape[1:])).index_copy_(0, ctx.token_index, out)


def layer_context(module: nn.Module, attention_mask: Any, cache: PagedCache, q_len: int, window: int | None,
                  dropout: float, kwargs: dict[str, Any]) -> tuple[StepContext, int | None]:
    """For a replaced attention module (fused.AttentionMixin) about to attend over ``cache``: the same checks as
    :func:`dlinfer_attention` (keywords, one call per layer and forward), then the step's context and window."""
    name = type(module).__name__
    _check_keywords(name, module, dropout, kwargs)
    _claim(name, cache, module.layer_idx)
    return _context_and_window(attention_mask, cache, q_len, name, module, {"sliding_window": window})


def token_rotary(cos: Tensor, sin: Tensor, ctx: StepContext) -> tuple[Tensor, Tensor] | None:
    """transformers' ``(batch or 1, q_len, rotary_dim)`` cos/sin for the step's packed tokens: ``(tokens,
    rotary_dim)``, which the rotary operator broadcasts over the heads of token-packed queries and keys; None for
    another layout. Made once per step for all layers (kept on the step's context, so nothing outlives it)."""
    found = ctx.token_rotary
    if found is not None and found[0] is cos and found[1] is sin:
        return found[2], found[3]
    if cos.dim() != 3 or cos.shape != sin.shape or cos.shape[1] != ctx.q_len or cos.shape[0] not in (1, ctx.batch_size):
        return None
    shape, flat = (ctx.batch_size, ctx.q_len, cos.shape[-1]), (ctx.batch_size * ctx.q_len, cos.shape[-1])
    cos_t, sin_t = cos.expand(shape).reshape(flat), sin.expand(shape).reshape(flat)
    if ctx.token_index is not None:
        cos_t, sin_t = cos_t.index_select(0, ctx.token_index), sin_t.index_select(0, ctx.token_index)
    ctx.token_rotary = (cos, sin, cos_t, sin_t)
    return cos_t, sin_t


def dlinfer_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                      scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention interface over :class:`PagedCache` (the ``cache`` keyword, or the running forward's
    cache): returns ``((batch, q_len, num_q_heads, head_dim), None)``; padding positions get zeros."""
    cache = get_cache(kwargs)
    if cache is None:
        cache = active_cache()
    if not isinstance(cache, PagedCache):
        raise RuntimeError("dlinfer attention needs a PagedCache as the cache (install the model with"
                           " dlinfer.framework.transformers.install(model))")
    name = type(module).__name__
    _check_keywords(name, module, dropout, kwargs)
    batch, num_q_heads, q_len, head_dim = query.shape
    if key.shape[2] != q_len or value.shape[2] != q_len:
        raise ValueError(f"dlinfer attention: {name} passes {key.shape[2]} keys for {q_len} new tokens (keys other"
                         " than the step's own); unsupported by the paged cache")
    if key.shape[-1] != head_dim or value.shape[-1] != head_dim:
        raise ValueError(f"dlinfer attention: {name} has query/key/value head_dim {head_dim}/{key.shape[-1]}/"
                         f"{value.shape[-1]}; the paged cache needs them equal")
    layer = getattr(module, "layer_idx", None)
    layer = layer if isinstance(layer, int) else cache.last_updated
    if layer is None:
        raise ValueError(f"dlinfer attention: {name} has no layer_idx and called no cache.update()")
    _claim(name, cache, layer)
    handed = cache.updated_ids.get(layer)
    if handed is not None and handed != (id(key), id(value)):
        raise ValueError(f"dlinfer attention: {name} changes the keys/values cache.update() handed back before"
                         " attending (the paged cache would hold other values than it attends to); unsupported")
    ctx, window = _context_and_window(attention_mask, cache, q_len, name, module, kwargs)
    out = attend_tokens(name, _packed(query, ctx), _packed(key, ctx), _packed(value, ctx), ctx, cache, layer, scaling,
                        window, kwargs.get("softcap"))
    return unpacked(out, ctx).reshape(batch, q_len, num_q_heads, -1), None
