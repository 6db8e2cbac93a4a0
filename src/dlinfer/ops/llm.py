"""The dlinfer operator interface: LMDeploy's signatures, one ``torch.ops.dlinfer`` operator each.

Conventions (docs/dlinfer.md has the full text):

- **Token-packed tensors.** Prefill queries, keys and values are ``(num_tokens, num_heads, head_dim)``: the
  tokens of every sequence of the batch one after the other. Decode queries are ``(batch, num_q_heads,
  head_dim)``, one token per sequence.
- **Plain lengths, not cumulative.** ``q_seq_len``, ``kv_seq_len`` are per-sequence lengths ``(batch,)``;
  ``q_start_loc`` holds each sequence's first token index in the packed tensor.
- **Paged KV cache.** ``key_cache``/``value_cache`` are ``(num_blocks, block_size, num_kv_heads, head_dim)``.
  ``block_table`` is ``(batch, max_blocks_per_seq)`` (int32 or int64): sequence ``b``'s position ``p`` lives in
  block ``block_table[b, p // block_size]``, slot ``p % block_size``. ``fill_kv_cache``'s ``kv_indices`` are flat
  slots ``block * block_size + slot``, one per token.
- **Causal attention.** ``prefill_attention`` and ``paged_prefill_attention`` are causal: each query sees the
  keys up to its own position (for the paged one, query ``i`` of a sequence with ``q`` new and ``kv`` total
  tokens sits at position ``kv - q + i``). An ``attn_mask`` list, when not empty, gives one boolean mask per
  sequence, ``True`` where attention is not allowed, used instead of the causal rule.
- **int8 KV cache** (``quant_bits=8``): caches of dtype int8, quantized per (token, kv head) asymmetrically:
  ``x ~= (q - zero) * scale`` with ``scale = (max - min) / 255``; the scales and zeros live in float32 tensors of
  shape ``(num_blocks, block_size, num_kv_heads)``, passed as ``k_scales_zeros=(k_scale, k_zero)`` and
  ``v_scales_zeros=(v_scale, v_zero)`` to ``fill_kv_cache`` and as ``kv_scales=(k_scale, v_scale)``,
  ``kv_zeros=(k_zero, v_zero)`` (or tensors stacked on a first dimension of 2) to the paged attentions.
- **W8A8**: activations quantized per token, symmetric int8, ``scale = amax / 127`` of shape ``(..., 1)``
  float32; weights int8 ``(out, in)`` with per-output-channel scales ``(out,)`` or ``(out, 1)``.
- **W4A16** (``weight_quant_matmul``): ``qweight`` is ``(in, out)`` int4 packed two per uint8 along ``out``
  (low nibble = even column), unsigned 0..15, or int8 ``(in, out)``; ``scale`` and ``offset`` are ``(out,)``
  (per channel, ``group_size=0``) or ``(in // group_size, out)``; ``w = (q - offset) * scale`` (offset default 8
  for int4, 0 for int8).

Each Python function below is op mode; it calls ``torch.ops.dlinfer.<name>``, the same operator graph mode
captures. Functions returning an LMDeploy ``attn_output`` alias write into it when one is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .library import define

__all__ = [
    "add_rms_norm",
    "add_rms_norm_w8a8",
    "apply_rotary_pos_emb",
    "dynamic_quant",
    "fill_kv_cache",
    "fused_moe",
    "linear",
    "linear_w8a8",
    "moe_gating_topk_softmax",
    "paged_decode_attention",
    "paged_prefill_attention",
    "prefill_attention",
    "rms_norm",
    "rms_norm_w8a8",
    "silu_and_mul",
    "weight_quant_matmul",
]


# -- fake (meta) implementations: output shapes and dtypes only ----------------------------------------------------
def _like(x: Tensor) -> Tensor:
    return torch.empty_like(x)


def _attn_out(query: Tensor, head_dim_v: int) -> Tensor:
    return query.new_empty((*query.shape[:-1], head_dim_v))


def _token_scale(x: Tensor) -> Tensor:
    return x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


_rms_norm = define("rms_norm", "(Tensor hidden_states, Tensor weight, float epsilon) -> Tensor",
                   lambda h, w, eps: _like(h))
_add_rms_norm = define(
    "add_rms_norm", "(Tensor hidden_states, Tensor residual, Tensor weight, float epsilon) -> (Tensor, Tensor)",
    lambda h, r, w, eps: (_like(h), _like(h)))
_rotary = define(
    "apply_rotary_pos_emb",
    "(Tensor query, Tensor key, Tensor? cos, Tensor? sin, Tensor? position_ids, Tensor? cos_sin_cache)"
    " -> (Tensor, Tensor)",
    lambda q, k, cos, sin, pos, cache: (_like(q), _like(k)))
_prefill_attention = define(
    "prefill_attention",
    "(Tensor query, Tensor key, Tensor value, Tensor q_start_loc, Tensor q_seq_len, int max_q_seq_len,"
    " int num_q_heads, int num_kv_heads, Tensor?[] attn_mask, float? softmax_scale=None,"
    " float[]? alibi_slopes=None) -> Tensor",
    lambda q, k, v, *rest: _attn_out(q, v.shape[-1]))
_fill_kv_cache = define(
    "fill_kv_cache",
    "(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor kv_indices,"
    " Tensor(c!)? k_scale=None, Tensor(d!)? k_zero=None, Tensor(e!)? v_scale=None, Tensor(f!)? v_zero=None,"
    " int quant_bits=0) -> ()",
    lambda *args: None)
_paged_decode_attention = define(
    "paged_decode_attention",
    "(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_table, int block_size, Tensor kv_seq_len,"
    " int max_kv_seq_len, int num_q_heads, int num_kv_heads, float? softmax_scale=None,"
    " float[]? alibi_slopes=None, Tensor? k_scale=None, Tensor? k_zero=None, Tensor? v_scale=None,"
    " Tensor? v_zero=None, int quant_bits=0) -> Tensor",
    lambda q, kc, vc, *rest: _attn_out(q, vc.shape[-1]))
_paged_prefill_attention = define(
    "paged_prefill_attention",
    "(Tensor query, Tensor key, Tensor value, Tensor key_cache, Tensor value_cache, Tensor block_table,"
    " int block_size, Tensor q_start_loc, Tensor q_seq_len, Tensor kv_seq_len, int max_q_seq_len,"
    " int num_q_heads, int num_kv_heads, Tensor?[] attn_mask, float? softmax_scale=None,"
    " float[]? alibi_slopes=None, Tensor? k_scale=None, Tensor? k_zero=None, Tensor? v_scale=None,"
    " Tensor? v_zero=None, int quant_bits=0) -> Tensor",
    lambda q, k, v, kc, vc, *rest: _attn_out(q, vc.shape[-1]))


def _silu_and_mul_fake(x: Tensor, dim: int) -> Tensor:
    shape = list(x.shape)
    shape[dim] = shape[dim] // 2
    return x.new_empty(shape)


_silu_and_mul = define("silu_and_mul", "(Tensor input, int dim=-1) -> Tensor", _silu_and_mul_fake)
_moe_gating = define(
    "moe_gating_topk_softmax", "(Tensor router_logits, int topk, bool renormalize=False) -> (Tensor, Tensor)",
    lambda logits, topk, renorm: (logits.new_empty((*logits.shape[:-1], topk), dtype=torch.float32),
                                  logits.new_empty((*logits.shape[:-1], topk), dtype=torch.int64)))
_fused_moe = define(
    "fused_moe",
    "(Tensor hidden_states, Tensor gate_up_weights, Tensor down_weights, Tensor topk_weights, Tensor topk_ids,"
    " int topk, bool renormalize=False) -> Tensor",
    lambda h, *rest: _like(h))
_linear = define(
    "linear", "(Tensor x, Tensor weight, Tensor? bias=None, bool all_reduce=False) -> Tensor",
    lambda x, w, b, ar: x.new_empty((*x.shape[:-1], w.shape[0])))
_dynamic_quant = define(
    "dynamic_quant",
    "(Tensor x, ScalarType? quant_dtype=None, str quant_granularity=\"PER_TOKEN\") -> (Tensor, Tensor)",
    lambda x, dt, gran: (x.new_empty(x.shape, dtype=torch.int8), _token_scale(x)))
_linear_w8a8 = define(
    "linear_w8a8",
    "(Tensor a, Tensor b, Tensor rms_scale, Tensor linear_scale, ScalarType out_dtype,"
    " ScalarType? quant_dtype=None, Tensor? bias=None) -> Tensor",
    lambda a, b, rs, ls, out_dtype, qd, bias: a.new_empty((*a.shape[:-1], b.shape[0]), dtype=out_dtype))
_rms_norm_w8a8 = define(
    "rms_norm_w8a8",
    "(Tensor hidden_states, Tensor weight, float epsilon, ScalarType? quant_dtype=None) -> (Tensor, Tensor)",
    lambda h, w, eps, qd: (h.new_empty(h.shape, dtype=torch.int8), _token_scale(h)))
_add_rms_norm_w8a8 = define(
    "add_rms_norm_w8a8",
    "(Tensor hidden_states, Tensor residual, Tensor weight, float epsilon, ScalarType? quant_dtype=None)"
    " -> (Tensor, Tensor, Tensor)",
    lambda h, r, w, eps, qd: (h.new_empty(h.shape, dtype=torch.int8), _token_scale(h), _like(h)))
_weight_quant_matmul = define(
    "weight_quant_matmul",
    "(Tensor x, Tensor qweight, Tensor scale, Tensor? offset=None, Tensor? bias=None, bool all_reduce=False,"
    " int group_size=0) -> Tensor",
    lambda x, qw, scale, *rest: x.new_empty((*x.shape[:-1], scale.shape[-1])))


# -- op mode: LMDeploy's Python signatures -------------------------------------------------------------------------
def _int(value: Any) -> Any:
    """A size argument as the schema's ``int``: a Python int or SymInt passes as it is (``int()`` would fix a
    symbolic size to one value under ``torch.compile``, and every step would compile again); a 0-d tensor or a
    numpy integer is converted."""
    if isinstance(value, (int, torch.SymInt)):
        return value
    return int(value)


def _into(out: Tensor, attn_output: Tensor | None) -> Tensor:
    if attn_output is None:
        return out
    attn_output.copy_(out.view(attn_output.shape))
    return attn_output


def _pair(value: Sequence[Tensor | None] | Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """(k, v) from a pair, a tensor stacked on a first dimension of 2, or None/empty."""
    if value is None:
        return None, None
    if isinstance(value, Tensor):
        if value.shape[0] != 2:
            raise ValueError(
                f"kv_scales/kv_zeros: expected a first dimension of 2 (key, value), got {tuple(value.shape)}")
        return value[0], value[1]
    items = list(value)
    if not items:
        return None, None
    if len(items) != 2:
        raise ValueError(f"expected a (key, value) pair of quantization tensors, got {len(items)} items")
    return items[0], items[1]


def rms_norm(hidden_states: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    """RMS norm over the last dimension: ``x / sqrt(mean(x^2) + epsilon) * weight`` (computed in float32)."""
    return _rms_norm.default(hidden_states, weight, float(epsilon))


def add_rms_norm(hidden_states: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """``added = hidden_states + residual``; returns ``(rms_norm(added), added)``."""
    return _add_rms_norm.default(hidden_states, residual, weight, float(epsilon))


def apply_rotary_pos_emb(query: Tensor, key: Tensor, cos: Tensor | None, sin: Tensor | None,
                         position_ids: Tensor | None = None,
                         cos_sin_cache: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Rotary embedding (half-split "rotate_half" pairs) of ``query`` ``(..., num_q_heads, head_dim)`` and ``key``
    ``(..., num_kv_heads, head_dim)``; returns new tensors. Either ``cos``/``sin`` of shape ``(..., rotary_dim)``
    (broadcast over the head dimension; HF's duplicated-halves layout) or ``position_ids`` ``(...)`` with
    ``cos_sin_cache`` ``(max_position, rotary_dim)`` holding ``[cos_half | sin_half]``. ``rotary_dim <
    head_dim`` rotates the first ``rotary_dim`` features only (partial rotary)."""
    return _rotary.default(query, key, cos, sin, position_ids, cos_sin_cache)


def prefill_attention(query: Tensor, key: Tensor, value: Tensor, q_start_loc: Tensor, q_seq_len: Tensor,
                      max_q_seq_len: int, num_q_heads: int, num_kv_heads: int,
                      attn_mask: Sequence[Tensor | None] = (), softmax_scale: float | None = None,
                      alibi_slopes: Sequence[float] | None = None, attn_output: Tensor | None = None) -> Tensor:
    """Causal attention over token-packed sequences without a cache (grouped-query heads allowed);
    ``(num_tokens, num_q_heads, head_dim)`` out."""
    out = _prefill_attention.default(query, key, value, q_start_loc, q_seq_len, _int(max_q_seq_len), _int(num_q_heads),
                             _int(num_kv_heads), list(attn_mask or ()), softmax_scale,
                             None if alibi_slopes is None else [float(s) for s in alibi_slopes])
    return _into(out, attn_output)


def fill_kv_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, kv_indices: Tensor,
                  k_scales_zeros: Sequence[Tensor | None] = (), v_scales_zeros: Sequence[Tensor | None] = (),
                  quant_bits: int = 0) -> tuple[Tensor, Tensor]:
    """Write ``key``/``value`` ``(num_tokens, num_kv_heads, head_dim)`` into the caches at flat slots
    ``kv_indices`` (in place); with ``quant_bits=8`` quantize them and write their scales and zeros too.
    Returns ``(key_cache, value_cache)``."""
    k_scale, k_zero = _pair(k_scales_zeros)
    v_scale, v_zero = _pair(v_scales_zeros)
    _fill_kv_cache.default(key, value, key_cache, value_cache, kv_indices, k_scale, k_zero, v_scale,
                                    v_zero, _int(quant_bits))
    return key_cache, value_cache


def paged_decode_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_table: Tensor,
                           block_size: int, kv_seq_len: Tensor, max_kv_seq_len: int, num_q_heads: int,
                           num_kv_heads: int, softmax_scale: float | None = None,
                           alibi_slopes: Sequence[float] | None = None, attn_output: Tensor | None = None,
                           kv_scales: Sequence[Tensor] | Tensor | None = None,
                           kv_zeros: Sequence[Tensor] | Tensor | None = None, quant_bits: int = 0) -> Tensor:
    """One decode step: query ``(batch, num_q_heads, head_dim)`` attends to the first ``kv_seq_len[b]`` cached
    positions of its sequence."""
    k_scale, v_scale = _pair(kv_scales)
    k_zero, v_zero = _pair(kv_zeros)
    out = _paged_decode_attention.default(query, key_cache, value_cache, block_table, _int(block_size), kv_seq_len,
                                  _int(max_kv_seq_len), _int(num_q_heads), _int(num_kv_heads), softmax_scale,
                                  None if alibi_slopes is None else [float(s) for s in alibi_slopes],
                                  k_scale, k_zero, v_scale, v_zero, _int(quant_bits or 0))
    return _into(out, attn_output)


def paged_prefill_attention(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                            block_table: Tensor, block_size: int, q_start_loc: Tensor, q_seq_len: Tensor,
                            kv_seq_len: Tensor, max_q_seq_len: int, num_q_heads: int, num_kv_heads: int,
                            attn_mask: Sequence[Tensor | None] = (), softmax_scale: float | None = None,
                            alibi_slopes: Sequence[float] | None = None, attn_output: Tensor | None = None,
                            kv_scales: Sequence[Tensor] | Tensor | None = None,
                            kv_zeros: Sequence[Tensor] | Tensor | None = None, quant_bits: int = 0) -> Tensor:
    """Causal attention of token-packed new queries over the paged cache (already filled with their keys):
    a prompt continued from cached tokens (prefix caching, chunked prefill)."""
    k_scale, v_scale = _pair(kv_scales)
    k_zero, v_zero = _pair(kv_zeros)
    out = _paged_prefill_attention.default(query, key, value, key_cache, value_cache, block_table, _int(block_size),
                                   q_start_loc, q_seq_len, kv_seq_len, _int(max_q_seq_len), _int(num_q_heads),
                                   _int(num_kv_heads), list(attn_mask or ()), softmax_scale,
                                   None if alibi_slopes is None else [float(s) for s in alibi_slopes],
                                   k_scale, k_zero, v_scale, v_zero, _int(quant_bits or 0))
    return _into(out, attn_output)


def silu_and_mul(input_tensor: Tensor, dim: int = -1) -> Tensor:
    """``silu(first half) * second half`` of ``input_tensor`` along ``dim``."""
    return _silu_and_mul.default(input_tensor, _int(dim))


def moe_gating_topk_softmax(router_logits: Tensor, topk: int, renormalize: bool = False) -> tuple[Tensor, Tensor]:
    """Softmax over experts (float32), then the ``topk`` largest: ``(weights float32, expert ids int64)``, each
    ``(..., topk)``; ``renormalize`` makes each token's weights sum to 1."""
    return _moe_gating.default(router_logits, _int(topk), bool(renormalize))


def fused_moe(hidden_states: Tensor, gate_up_weights: Tensor, down_weights: Tensor, topk_weights: Tensor,
              topk_ids: Tensor, topk: int, renormalize: bool = False) -> Tensor:
    """Mixture of experts on ``hidden_states`` ``(num_tokens, hidden)``: ``gate_up_weights`` ``(num_experts,
    2 * intermediate, hidden)`` (gate rows first), ``down_weights`` ``(num_experts, hidden, intermediate)``;
    ``sum_k topk_weights[:, k] * down_e(silu(gate_e x) * up_e x)`` with ``e = topk_ids[:, k]``."""
    return _fused_moe.default(hidden_states, gate_up_weights, down_weights, topk_weights, topk_ids, _int(topk),
                      bool(renormalize))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, all_reduce: bool = False) -> Tensor:
    """``x @ weight.T + bias``; ``all_reduce`` sums the result over the default process group (tensor
    parallelism)."""
    return _linear.default(x, weight, bias, bool(all_reduce))


def dynamic_quant(x: Tensor, quant_dtype: torch.dtype = torch.int8,
                  quant_granularity: str = "PER_TOKEN") -> tuple[Tensor, Tensor]:
    """Symmetric per-token int8 quantization: ``(q int8, scale float32 (..., 1))``, ``x ~= q * scale``."""
    return _dynamic_quant.default(x, quant_dtype, quant_granularity)


def linear_w8a8(a: Tensor, b: Tensor, rms_scale: Tensor, linear_scale: Tensor, out_dtype: torch.dtype,
                quant_dtype: torch.dtype = torch.int8, bias: Tensor | None = None) -> Tensor:
    """int8 ``a`` ``(..., in)`` with per-token ``rms_scale`` times int8 ``b`` ``(out, in)`` with per-channel
    ``linear_scale``, accumulated in int32, scaled, plus ``bias``, in ``out_dtype``."""
    return _linear_w8a8.default(a, b, rms_scale, linear_scale, out_dtype, quant_dtype, bias)


def rms_norm_w8a8(hidden_states: Tensor, weight: Tensor, epsilon: float,
                  quant_dtype: torch.dtype = torch.int8) -> tuple[Tensor, Tensor]:
    """``dynamic_quant(rms_norm(hidden_states))``: ``(q int8, scale (..., 1))``."""
    return _rms_norm_w8a8.default(hidden_states, weight, float(epsilon), quant_dtype)


def add_rms_norm_w8a8(hidden_states: Tensor, residual: Tensor, weight: Tensor, epsilon: float,
                      quant_dtype: torch.dtype = torch.int8) -> tuple[Tensor, Tensor, Tensor]:
    """``added = hidden_states + residual``; ``(q, scale, added)`` with ``q, scale = rms_norm_w8a8(added)``."""
    return _add_rms_norm_w8a8.default(hidden_states, residual, weight, float(epsilon), quant_dtype)


def weight_quant_matmul(x: Tensor, qweight: Tensor, scale: Tensor, offset: Tensor | None = None,
                        bias: Tensor | None = None, all_reduce: bool = False, group_size: int = 0) -> Tensor:
    """``x @ dequant(qweight) + bias`` with int4 (packed uint8) or int8 weights ``(in, out)`` (W4A16/W8A16)."""
    return _weight_quant_matmul.default(x, qweight, scale, offset, bias, bool(all_reduce), _int(group_size))
