"""droplet's kernels: dlinfer's arguments adapted to the DIOPI fused functions (``torch.ops.diopi.*``).

Adaptations: plain lengths -> cumulative ``cu_seqlens``; duplicated-halves ``cos``/``sin`` -> the half width
``diopi::rotary_embedding`` broadcasts; partial rotary -> rotate the first ``rotary_dim`` features only; paged
prefill -> the cached keys of each sequence gathered and packed for ``diopi::flash_attention_varlen`` (its causal
mask is aligned bottom right, dlinfer's rule). Forms a DIOPI function lacks (alibi, explicit masks, the int8 cache,
``silu_and_mul`` along another dimension) and operators without one (fused_moe, linear, the quantized ones) run
the reference kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

import diopi.custom_ops  # noqa: F401  (defines the torch.ops.diopi operators)
from dlinfer.reference import activation, attention, kv_cache, moe, norm, rotary
from dlinfer.reference._checks import check_quant_bits

__all__ = ["KERNELS"]


def rms_norm(hidden_states: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    """``diopi::rms_norm`` (its saved inverse RMS dropped)."""
    if weight.shape[-1] != hidden_states.shape[-1]:
        return norm.rms_norm(hidden_states, weight, epsilon)  # the reference's error message
    return torch.ops.diopi.rms_norm(hidden_states, weight, epsilon)[0]


def add_rms_norm(hidden_states: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """``diopi::add_rms_norm``: ``(normed, added)``."""
    if residual.shape != hidden_states.shape or weight.shape[-1] != hidden_states.shape[-1]:
        return norm.add_rms_norm(hidden_states, residual, weight, epsilon)
    out, added, _ = torch.ops.diopi.add_rms_norm(hidden_states, residual, weight, epsilon)
    return out, added


def _rotate(x: Tensor, cos_half: Tensor, sin_half: Tensor) -> Tensor:
    rot = 2 * cos_half.shape[-1]
    if rot == x.shape[-1]:
        return torch.ops.diopi.rotary_embedding(x, cos_half, sin_half, False)
    head = torch.ops.diopi.rotary_embedding(x[..., :rot].contiguous(), cos_half, sin_half, False)
    return torch.cat((head, x[..., rot:]), dim=-1)


def apply_rotary_pos_emb(query: Tensor, key: Tensor, cos: Tensor | None, sin: Tensor | None,
                         position_ids: Tensor | None, cos_sin_cache: Tensor | None) -> tuple[Tensor, Tensor]:
    """``diopi::rotary_embedding`` (half-split pairs) on the first ``rotary_dim`` features."""
    if cos is not None and sin is not None:
        rot = cos.shape[-1]
        if cos.shape != sin.shape or rot % 2 or rot > query.shape[-1]:
            return rotary.apply_rotary_pos_emb(query, key, cos, sin, position_ids, cos_sin_cache)
        cos_half, sin_half = cos[..., :rot // 2], sin[..., :rot // 2]
    elif position_ids is not None and cos_sin_cache is not None and cos_sin_cache.dim() == 2:
        cos_half, sin_half = cos_sin_cache[position_ids.long()].chunk(2, dim=-1)
        if 2 * cos_half.shape[-1] > query.shape[-1]:
            return rotary.apply_rotary_pos_emb(query, key, cos, sin, position_ids, cos_sin_cache)
    else:
        return rotary.apply_rotary_pos_emb(query, key, cos, sin, position_ids, cos_sin_cache)
    outs = []
    for x in (query, key):
        c = cos_half if cos_half.dim() == x.dim() else cos_half.unsqueeze(-2)
        s = sin_half if sin_half.dim() == x.dim() else sin_half.unsqueeze(-2)
        outs.append(_rotate(x, c.to(x.dtype), s.to(x.dtype)))
    return outs[0], outs[1]


def silu_and_mul(input_tensor: Tensor, dim: int) -> Tensor:
    """``diopi::silu_and_mul`` (last dimension only)."""
    if dim not in (-1, input_tensor.dim() - 1) or input_tensor.shape[-1] % 2:
        return activation.silu_and_mul(input_tensor, dim)
    return torch.ops.diopi.silu_and_mul(input_tensor)


def _cumulative(lengths: Tensor) -> Tensor:
    return torch.cat((lengths.new_zeros(1), lengths.cumsum(0))).to(torch.int64)


def _scale(softmax_scale: float | None, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)


def prefill_attention(query: Tensor, key: Tensor, value: Tensor, q_start_loc: Tensor, q_seq_len: Tensor,
                      max_q_seq_len: int, num_q_heads: int, num_kv_heads: int, attn_mask: list[Tensor | None],
                      softmax_scale: float | None, alibi_slopes: list[float] | None, sliding_window: int | None,
                      logit_softcapping: float | None) -> Tensor:
    """``diopi::flash_attention_varlen`` (causal) over the packed sequences."""
    if any(m is not None for m in attn_mask) or alibi_slopes is not None or sliding_window or logit_softcapping:
        return attention.prefill_attention(query, key, value, q_start_loc, q_seq_len, max_q_seq_len, num_q_heads,
                                           num_kv_heads, attn_mask, softmax_scale, alibi_slopes, sliding_window,
                                           logit_softcapping)
    attention.check_prefill(query, key, value, q_start_loc, q_seq_len, num_q_heads, num_kv_heads)
    cu = _cumulative(q_seq_len)
    out, _ = torch.ops.diopi.flash_attention_varlen(query, key, value, cu, cu, max_q_seq_len, max_q_seq_len,
                                                    _scale(softmax_scale, query.shape[-1]), True)
    return out


def fill_kv_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, kv_indices: Tensor,
                  k_scale: Tensor | None, k_zero: Tensor | None, v_scale: Tensor | None, v_zero: Tensor | None,
                  quant_bits: int) -> None:
    """``diopi::reshape_and_cache`` (``kv_indices`` are its slot mapping); the int8 cache: the reference."""
    check_quant_bits("fill_kv_cache", quant_bits)
    if quant_bits:
        kv_cache.fill_kv_cache(key, value, key_cache, value_cache, kv_indices, k_scale, k_zero, v_scale, v_zero,
                               quant_bits)
        return
    kv_cache.check_fill_kv_cache(key, value, key_cache, value_cache, kv_indices, k_scale, k_zero, v_scale, v_zero,
                                 quant_bits)
    torch.ops.diopi.reshape_and_cache(key, value, key_cache, value_cache, kv_indices.to(torch.int64))


def paged_decode_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_table: Tensor,
                           block_size: int, kv_seq_len: Tensor, max_kv_seq_len: int, num_q_heads: int,
                           num_kv_heads: int, softmax_scale: float | None, alibi_slopes: list[float] | None,
                           k_scale: Tensor | None, k_zero: Tensor | None, v_scale: Tensor | None,
                           v_zero: Tensor | None, quant_bits: int, sliding_window: int | None,
                           logit_softcapping: float | None) -> Tensor:
    """``diopi::paged_attention_decode``; alibi, a window, softcapping and the int8 cache: the reference."""
    if alibi_slopes is not None or quant_bits or sliding_window or logit_softcapping:
        return attention.paged_decode_attention(query, key_cache, value_cache, block_table, block_size, kv_seq_len,
                                                max_kv_seq_len, num_q_heads, num_kv_heads, softmax_scale,
                                                alibi_slopes, k_scale, k_zero, v_scale, v_zero, quant_bits,
                                                sliding_window, logit_softcapping)
    attention.check_paged_decode(query, key_cache, block_table, block_size, kv_seq_len, max_kv_seq_len,
                                 num_q_heads, num_kv_heads)
    return torch.ops.diopi.paged_attention_decode(query, key_cache, value_cache, block_table, kv_seq_len,
                                                  _scale(softmax_scale, query.shape[-1]))


def paged_prefill_attention(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                            block_table: Tensor, block_size: int, q_start_loc: Tensor, q_seq_len: Tensor,
                            kv_seq_len: Tensor, max_q_seq_len: int, num_q_heads: int, num_kv_heads: int,
                            attn_mask: list[Tensor | None], softmax_scale: float | None,
                            alibi_slopes: list[float] | None, k_scale: Tensor | None, k_zero: Tensor | None,
                            v_scale: Tensor | None, v_zero: Tensor | None, quant_bits: int,
                            max_kv_seq_len: int | None, sliding_window: int | None,
                            logit_softcapping: float | None) -> Tensor:
    """``diopi::flash_attention_varlen`` (causal, bottom-right aligned) over each sequence's cached keys."""
    if (any(m is not None for m in attn_mask) or alibi_slopes is not None or quant_bits or sliding_window
            or logit_softcapping):
        return attention.paged_prefill_attention(query, key, value, key_cache, value_cache, block_table,
                                                 block_size, q_start_loc, q_seq_len, kv_seq_len, max_q_seq_len,
                                                 num_q_heads, num_kv_heads, attn_mask, softmax_scale, alibi_slopes,
                                                 k_scale, k_zero, v_scale, v_zero, quant_bits, max_kv_seq_len,
                                                 sliding_window, logit_softcapping)
    attention.check_paged_prefill(query, key_cache, block_table, block_size, q_start_loc, q_seq_len, kv_seq_len,
                                  num_q_heads, num_kv_heads)
    lengths = [int(n) for n in kv_seq_len.tolist()]
    max_kv = max(lengths, default=0)  # the packing below needs each length on the host anyway
    keys = kv_cache.gather_kv(key_cache, block_table, block_size, max_kv)
    values = kv_cache.gather_kv(value_cache, block_table, block_size, max_kv)
    packed_k = torch.cat([keys[b, :n] for b, n in enumerate(lengths)])
    packed_v = torch.cat([values[b, :n] for b, n in enumerate(lengths)])
    out, _ = torch.ops.diopi.flash_attention_varlen(query, packed_k, packed_v, _cumulative(q_seq_len),
                                                    _cumulative(kv_seq_len), max_q_seq_len, max_kv,
                                                    _scale(softmax_scale, query.shape[-1]), True)
    return out


def moe_gating_topk_softmax(router_logits: Tensor, topk: int, renormalize: bool) -> tuple[Tensor, Tensor]:
    """``diopi::moe_gating_topk_softmax`` (float32 weights, int64 ids)."""
    if not 0 < topk <= router_logits.shape[-1]:
        return moe.moe_gating_topk_softmax(router_logits, topk, renormalize)
    weights, ids = torch.ops.diopi.moe_gating_topk_softmax(router_logits, topk, renormalize)
    return weights.to(torch.float32), ids.to(torch.int64)


#: operator -> droplet kernel; every other operator runs the reference kernel on dipu tensors.
KERNELS: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in (
    rms_norm, add_rms_norm, apply_rotary_pos_emb, silu_and_mul, prefill_attention, fill_kv_cache,
    paged_decode_attention, paged_prefill_attention, moe_gating_topk_softmax)}
