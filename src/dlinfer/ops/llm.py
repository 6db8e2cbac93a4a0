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

from dlinfer.config import dlinfer_config
from dlinfer.reference._memo import StepMemo
from dlinfer.utils.type_annotation import MoeMetadata, unsupported_moe_fields

from .call_forms import MISSING, accept_older_form, argument
from .library import call, define

__all__ = [
    "add_rms_norm",
    "add_rms_norm_w8a8",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_interleaved",
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
_prefill_attention_op = define(
    "prefill_attention",
    "(Tensor query, Tensor key, Tensor value, Tensor q_start_loc, Tensor q_seq_len, int max_q_seq_len,"
    " int num_q_heads, int num_kv_heads, Tensor?[] attn_mask, float? softmax_scale=None,"
    " float[]? alibi_slopes=None, int? sliding_window=None, float? logit_softcapping=None) -> Tensor",
    lambda q, k, v, *rest: _attn_out(q, v.shape[-1]))
_fill_kv_cache = define(
    "fill_kv_cache",
    "(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor kv_indices,"
    " Tensor(c!)? k_scale=None, Tensor(d!)? k_zero=None, Tensor(e!)? v_scale=None, Tensor(f!)? v_zero=None,"
    " int quant_bits=0) -> ()",
    lambda *args: None)
_paged_decode_attention_op = define(
    "paged_decode_attention",
    "(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_table, int block_size, Tensor kv_seq_len,"
    " int max_kv_seq_len, int num_q_heads, int num_kv_heads, float? softmax_scale=None,"
    " float[]? alibi_slopes=None, Tensor? k_scale=None, Tensor? k_zero=None, Tensor? v_scale=None,"
    " Tensor? v_zero=None, int quant_bits=0, int? sliding_window=None, float? logit_softcapping=None) -> Tensor",
    lambda q, kc, vc, *rest: _attn_out(q, vc.shape[-1]))
_paged_prefill_attention_op = define(
    "paged_prefill_attention",
    "(Tensor query, Tensor key, Tensor value, Tensor key_cache, Tensor value_cache, Tensor block_table,"
    " int block_size, Tensor q_start_loc, Tensor q_seq_len, Tensor kv_seq_len, int max_q_seq_len,"
    " int num_q_heads, int num_kv_heads, Tensor?[] attn_mask, float? softmax_scale=None,"
    " float[]? alibi_slopes=None, Tensor? k_scale=None, Tensor? k_zero=None, Tensor? v_scale=None,"
    " Tensor? v_zero=None, int quant_bits=0, int? max_kv_seq_len=None, int? sliding_window=None,"
    " float? logit_softcapping=None) -> Tensor",
    lambda q, k, v, kc, vc, *rest: _attn_out(q, vc.shape[-1]))
_rotary_interleaved = define(
    "apply_rotary_pos_emb_interleaved",
    "(Tensor x, Tensor cos, Tensor sin, bool return_native_layout=True) -> Tensor",
    lambda x, cos, sin, native: _like(x))


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


def _opt_int(value: Any) -> Any:
    return None if value is None else _int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _slopes(alibi_slopes: Sequence[float] | None) -> list[float] | None:
    return None if alibi_slopes is None else [float(s) for s in alibi_slopes]


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


#: recent host -> device copies of length tensors: the layers of a step pass the same host tensors, so each is
#: copied once per step, and the kernels' per-step memos see one tensor
_COPIES = StepMemo(size=4)


def _on(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device`` (LMDeploy hands lengths over as host tensors; the copy does not wait for the device)."""
    if t.device == device:
        return t
    copy = _COPIES.get((t,), device)
    if copy is None:
        copy = t.to(device, non_blocking=True)
        _COPIES.put((t,), device, copy)
    return copy


def _starts_and_lengths(q_end_loc: Tensor, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(q_start_loc, q_seq_len)`` on ``device`` from the cumulative query ends (``cu_seqlens_q[1:]``)."""
    ends = q_end_loc.reshape(-1).to(torch.int64)
    starts = torch.cat((ends.new_zeros(1), ends[:-1]))
    return _on(starts, device), _on(ends - starts, device)


def _starts(q_seq_len: Tensor) -> Tensor:
    lengths = q_seq_len.to(torch.int64)
    return lengths.cumsum(0) - lengths


def _check_head_size_v(op: str, head_size_v: int | None, value_cache: Tensor | None) -> None:
    if head_size_v is None or value_cache is None or int(head_size_v) == value_cache.shape[-1]:
        return
    raise ValueError(f"{op}: head_size_v={head_size_v} differs from value_cache's head dimension "
                     f"{value_cache.shape[-1]} (a value head narrower than its cache row is not implemented)")


def _require_tensor(op: str, name: str, value: Any) -> None:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: {name} must be a tensor, got {type(value).__name__}")


def rms_norm(hidden_states: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    """RMS norm over the last dimension: ``x / sqrt(mean(x^2) + epsilon) * weight`` (computed in float32)."""
    return call(_rms_norm, hidden_states, weight, float(epsilon))


def add_rms_norm(hidden_states: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """``added = hidden_states + residual``; returns ``(rms_norm(added), added)``."""
    return call(_add_rms_norm, hidden_states, residual, weight, float(epsilon))


def apply_rotary_pos_emb(query: Tensor, key: Tensor, cos: Tensor | None, sin: Tensor | None,
                         position_ids: Tensor | None = None,
                         cos_sin_cache: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Rotary embedding (half-split "rotate_half" pairs) of ``query`` ``(..., num_q_heads, head_dim)`` and ``key``
    ``(..., num_kv_heads, head_dim)``; returns new tensors. Either ``cos``/``sin`` of shape ``(..., rotary_dim)``
    (broadcast over the head dimension; HF's duplicated-halves layout) or ``position_ids`` ``(...)`` with
    ``cos_sin_cache`` ``(max_position, rotary_dim)`` holding ``[cos_half | sin_half]``. ``rotary_dim <
    head_dim`` rotates the first ``rotary_dim`` features only (partial rotary)."""
    return call(_rotary, query, key, cos, sin, position_ids, cos_sin_cache)


def apply_rotary_pos_emb_interleaved(x: Tensor, cos: Tensor, sin: Tensor,
                                     return_native_layout: bool = True) -> Tensor:
    """Rotary embedding of adjacent pairs ``(x[2i], x[2i+1])`` (complex-number RoPE) of ``x`` ``(tokens, heads, 1,
    head_dim)`` (LMDeploy packs query and key heads together); ``cos``/``sin`` ``(tokens, 1, 1, head_dim)`` with
    each pair's value twice, or ``(..., head_dim // 2)`` one per pair. ``return_native_layout=True`` returns the
    rotated pairs de-interleaved (all first elements, then all second elements); ``False`` keeps them adjacent."""
    return call(_rotary_interleaved, x, cos, sin, bool(return_native_layout))


def _prefill_attention(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor | None,
                       value_cache: Tensor | None, q_seq_len: Tensor, kv_seq_len: Tensor, max_q_seq_len: int,
                       num_q_heads: int, num_kv_heads: int, attn_mask: Sequence[Tensor | None] = (),
                       softmax_scale: float | None = None, alibi_slopes: Sequence[float] | None = None,
                       attn_output: Tensor | None = None, actual_seq_lengths_cpu: Tensor | None = None, *,
                       sliding_window: int | None = None, logit_softcapping: float | None = None) -> Tensor:
    """Causal self-attention over token-packed sequences, no cache read (the first prefill of every sequence):
    ``query``/``key``/``value`` ``(num_tokens, heads, head_dim)``, ``q_seq_len`` tokens per sequence (``kv_seq_len``
    equals it: the keys are the queries' own). ``key_cache``/``value_cache`` (may be None) are accepted for vendors
    that read the cache; ``actual_seq_lengths_cpu`` (the cumulative query ends on the host) gives the start of
    each sequence without a device computation. ``sliding_window``: keys within that many positions;
    ``logit_softcapping``: ``cap * tanh(scores / cap)``. Returns ``(num_tokens, num_q_heads, head_dim_v)``,
    written into ``attn_output`` when given."""
    if actual_seq_lengths_cpu is not None:
        q_start_loc, lengths = _starts_and_lengths(actual_seq_lengths_cpu, query.device)
    else:
        q_start_loc, lengths = _starts(q_seq_len), q_seq_len
    return _legacy_prefill_attention(query, key, value, q_start_loc, lengths, max_q_seq_len, num_q_heads,
                                     num_kv_heads, attn_mask, softmax_scale, alibi_slopes, attn_output,
                                     sliding_window=sliding_window, logit_softcapping=logit_softcapping)


def _legacy_prefill_attention(query: Tensor, key: Tensor, value: Tensor, q_start_loc: Tensor, q_seq_len: Tensor,
                              max_q_seq_len: int, num_q_heads: int, num_kv_heads: int,
                              attn_mask: Sequence[Tensor | None] = (), softmax_scale: float | None = None,
                              alibi_slopes: Sequence[float] | None = None, attn_output: Tensor | None = None, *,
                              sliding_window: int | None = None,
                              logit_softcapping: float | None = None) -> Tensor:
    op = "prefill_attention"
    _require_tensor(op, "q_start_loc", q_start_loc)
    _require_tensor(op, "q_seq_len", q_seq_len)
    out = call(_prefill_attention_op, query, key, value, q_start_loc, q_seq_len, _int(max_q_seq_len),
                                        _int(num_q_heads), _int(num_kv_heads), list(attn_mask or ()),
                                        _opt_float(softmax_scale), _slopes(alibi_slopes), _opt_int(sliding_window),
                                        _opt_float(logit_softcapping))
    return _into(out, attn_output)


def _older_prefill(args: tuple, kwargs: dict[str, Any]) -> bool:
    # LMDeploy 0.6: (query, key, value, q_start_loc, q_seq_len, max_q_seq_len: int, ...)
    sixth = argument(args, kwargs, 5, "q_seq_len")
    return "q_start_loc" in kwargs or (sixth is not MISSING and not isinstance(sixth, Tensor))


prefill_attention = accept_older_form(_prefill_attention, _legacy_prefill_attention, "LMDeploy 0.6",
                                      _older_prefill)


def fill_kv_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, kv_indices: Tensor,
                  k_scales_zeros: Sequence[Tensor | None] = (), v_scales_zeros: Sequence[Tensor | None] = (),
                  quant_bits: int | None = 0) -> tuple[Tensor, Tensor]:
    """Write ``key``/``value`` ``(num_tokens, num_kv_heads, head_dim)`` into the caches at flat slots
    ``kv_indices`` ``(num_tokens,)`` (or ``(num_tokens, 1)``) in place; with ``quant_bits=8`` quantize them and
    write their scales and zeros too. Returns ``(key_cache, value_cache)``."""
    k_scale, k_zero = _pair(k_scales_zeros)
    v_scale, v_zero = _pair(v_scales_zeros)
    if kv_indices.dim() == 2 and kv_indices.shape[1] == 1:
        kv_indices = kv_indices.reshape(-1)
    call(_fill_kv_cache, key, value, key_cache, value_cache, kv_indices, k_scale, k_zero, v_scale, v_zero,
                           _int(quant_bits or 0))
    return key_cache, value_cache


def _paged_decode_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_table: Tensor,
                            block_size: int, q_end_loc: Tensor, kv_seq_len: Tensor, max_kv_seq_len: int,
                            num_q_heads: int, num_kv_heads: int, head_size_v: int | None = None,
                            softmax_scale: float | None = None, alibi_slopes: Sequence[float] | None = None,
                            attn_output: Tensor | None = None, kv_scales: Sequence[Tensor] | Tensor | None = None,
                            kv_zeros: Sequence[Tensor] | Tensor | None = None, quant_bits: int | None = 0, *,
                            sliding_window: int | None = None, logit_softcapping: float | None = None) -> Tensor:
    """One decode step: query ``(batch, num_q_heads, head_dim)``, one token per sequence (``q_end_loc``: the
    cumulative query ends, ``1..batch``), attends to the first ``kv_seq_len[b]`` cached positions of its
    sequence. ``q_end_loc``/``kv_seq_len`` may be host tensors (LMDeploy's ``*_cpu``)."""
    op = "paged_decode_attention"
    _require_tensor(op, "q_end_loc", q_end_loc)
    if q_end_loc.numel() != query.shape[0] or kv_seq_len.numel() != query.shape[0]:
        raise ValueError(f"{op}: query has {query.shape[0]} tokens for {q_end_loc.numel()} sequences "
                         f"(q_end_loc) and {kv_seq_len.numel()} kv lengths: decoding several tokens per sequence "
                         "is not implemented (use paged_prefill_attention)")
    _check_head_size_v(op, head_size_v, value_cache)
    return _legacy_paged_decode_attention(query, key_cache, value_cache, block_table, block_size,
                                          _on(kv_seq_len, query.device), max_kv_seq_len, num_q_heads, num_kv_heads,
                                          softmax_scale, alibi_slopes, attn_output, kv_scales, kv_zeros, quant_bits,
                                          sliding_window=sliding_window, logit_softcapping=logit_softcapping)


def _legacy_paged_decode_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_table: Tensor,
                                   block_size: int, kv_seq_len: Tensor, max_kv_seq_len: int, num_q_heads: int,
                                   num_kv_heads: int, softmax_scale: float | None = None,
                                   alibi_slopes: Sequence[float] | None = None, attn_output: Tensor | None = None,
                                   kv_scales: Sequence[Tensor] | Tensor | None = None,
                                   kv_zeros: Sequence[Tensor] | Tensor | None = None, quant_bits: int | None = 0, *,
                                   sliding_window: int | None = None,
                                   logit_softcapping: float | None = None) -> Tensor:
    op = "paged_decode_attention"
    _require_tensor(op, "kv_seq_len", kv_seq_len)
    if isinstance(max_kv_seq_len, Tensor) and max_kv_seq_len.numel() != 1:
        raise TypeError(f"{op}: max_kv_seq_len must be an int, got a tensor of shape {tuple(max_kv_seq_len.shape)}")
    k_scale, v_scale = _pair(kv_scales)
    k_zero, v_zero = _pair(kv_zeros)
    out = call(_paged_decode_attention_op, query, key_cache, value_cache, block_table, _int(block_size),
                                             kv_seq_len, _int(max_kv_seq_len), _int(num_q_heads),
                                             _int(num_kv_heads), _opt_float(softmax_scale), _slopes(alibi_slopes),
                                             k_scale, k_zero, v_scale, v_zero, _int(quant_bits or 0),
                                             _opt_int(sliding_window), _opt_float(logit_softcapping))
    return _into(out, attn_output)


def _older_decode(args: tuple, kwargs: dict[str, Any]) -> bool:
    # LMDeploy 0.6: (..., block_size, kv_seq_len, max_kv_seq_len: int, ...), no q_end_loc
    seventh = argument(args, kwargs, 6, "kv_seq_len")
    if seventh is not MISSING and not isinstance(seventh, Tensor):
        return True
    return argument(args, kwargs, 5, "q_end_loc") is MISSING and "kv_seq_len" in kwargs


paged_decode_attention = accept_older_form(_paged_decode_attention, _legacy_paged_decode_attention, "LMDeploy 0.6",
                                           _older_decode)


def _paged_prefill_attention(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                             block_table: Tensor, block_size: int, q_end_loc: Tensor, kv_seq_len: Tensor,
                             max_q_seq_len: int, max_kv_seq_len: int, num_q_heads: int, num_kv_heads: int,
                             attn_mask: Sequence[Tensor | None] = (), head_size_v: int | None = None,
                             softmax_scale: float | None = None, alibi_slopes: Sequence[float] | None = None,
                             attn_output: Tensor | None = None, kv_scales: Sequence[Tensor] | Tensor | None = None,
                             kv_zeros: Sequence[Tensor] | Tensor | None = None, quant_bits: int | None = 0, *,
                             sliding_window: int | None = None, logit_softcapping: float | None = None) -> Tensor:
    """Causal attention of token-packed new queries over the paged cache (already filled with their keys): a
    prompt continued from cached tokens (prefix caching, chunked prefill). ``q_end_loc``: cumulative query ends
    (``cu_seqlens_q[1:]``); ``kv_seq_len``: cached + new tokens per sequence; both may be host tensors."""
    op = "paged_prefill_attention"
    _require_tensor(op, "q_end_loc", q_end_loc)
    _require_tensor(op, "kv_seq_len", kv_seq_len)
    _check_head_size_v(op, head_size_v, value_cache)
    q_start_loc, q_seq_len = _starts_and_lengths(q_end_loc, query.device)
    return _paged_prefill(query, key, value, key_cache, value_cache, block_table, block_size, q_start_loc,
                          q_seq_len, _on(kv_seq_len, query.device), max_q_seq_len, num_q_heads, num_kv_heads,
                          attn_mask, softmax_scale, alibi_slopes, attn_output, kv_scales, kv_zeros, quant_bits,
                          _int(max_kv_seq_len), sliding_window, logit_softcapping)


def _legacy_paged_prefill_attention(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor,
                                    value_cache: Tensor, block_table: Tensor, block_size: int, q_start_loc: Tensor,
                                    q_seq_len: Tensor, kv_seq_len: Tensor, max_q_seq_len: int, num_q_heads: int,
                                    num_kv_heads: int, attn_mask: Sequence[Tensor | None] = (),
                                    softmax_scale: float | None = None, alibi_slopes: Sequence[float] | None = None,
                                    attn_output: Tensor | None = None,
                                    kv_scales: Sequence[Tensor] | Tensor | None = None,
                                    kv_zeros: Sequence[Tensor] | Tensor | None = None, quant_bits: int | None = 0, *,
                                    sliding_window: int | None = None,
                                    logit_softcapping: float | None = None) -> Tensor:
    op = "paged_prefill_attention"
    for name, t in (("q_start_loc", q_start_loc), ("q_seq_len", q_seq_len), ("kv_seq_len", kv_seq_len)):
        _require_tensor(op, name, t)
    return _paged_prefill(query, key, value, key_cache, value_cache, block_table, block_size, q_start_loc,
                          q_seq_len, kv_seq_len, max_q_seq_len, num_q_heads, num_kv_heads, attn_mask, softmax_scale,
                          alibi_slopes, attn_output, kv_scales, kv_zeros, quant_bits, None, sliding_window,
                          logit_softcapping)


def _paged_prefill(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                   block_table: Tensor, block_size: int, q_start_loc: Tensor, q_seq_len: Tensor, kv_seq_len: Tensor,
                   max_q_seq_len: int, num_q_heads: int, num_kv_heads: int, attn_mask: Sequence[Tensor | None],
                   softmax_scale: float | None, alibi_slopes: Sequence[float] | None, attn_output: Tensor | None,
                   kv_scales: Any, kv_zeros: Any, quant_bits: int | None, max_kv_seq_len: int | None,
                   sliding_window: int | None, logit_softcapping: float | None) -> Tensor:
    k_scale, v_scale = _pair(kv_scales)
    k_zero, v_zero = _pair(kv_zeros)
    out = call(_paged_prefill_attention_op,
        query, key, value, key_cache, value_cache, block_table, _int(block_size), q_start_loc, q_seq_len,
        kv_seq_len, _int(max_q_seq_len), _int(num_q_heads), _int(num_kv_heads), list(attn_mask or ()),
        _opt_float(softmax_scale), _slopes(alibi_slopes), k_scale, k_zero, v_scale, v_zero, _int(quant_bits or 0),
        _opt_int(max_kv_seq_len), _opt_int(sliding_window), _opt_float(logit_softcapping))
    return _into(out, attn_output)


def _older_paged_prefill(args: tuple, kwargs: dict[str, Any]) -> bool:
    # LMDeploy 0.6: (..., block_size, q_start_loc, q_seq_len, kv_seq_len: Tensor, max_q_seq_len: int, ...)
    tenth = argument(args, kwargs, 9, "max_q_seq_len")
    return "q_start_loc" in kwargs or "q_seq_len" in kwargs or isinstance(tenth, Tensor)


paged_prefill_attention = accept_older_form(_paged_prefill_attention, _legacy_paged_prefill_attention,
                                            "LMDeploy 0.6", _older_paged_prefill)


def silu_and_mul(input_tensor: Tensor, dim: int = -1) -> Tensor:
    """``silu(first half) * second half`` of ``input_tensor`` along ``dim``."""
    return call(_silu_and_mul, input_tensor, _int(dim))


def _check_moe_metadata(op: str, moe_metadata: Any) -> None:
    if moe_metadata is None:
        return
    fields = unsupported_moe_fields(moe_metadata)
    if fields:
        raise NotImplementedError(f"{op}: moe_metadata asks for {', '.join(fields)}; dlinfer computes a whole MoE "
                                  "layer on one device (no data/tensor/expert parallel MoE, no grouped routing)")


def moe_gating_topk_softmax(router_logits: Tensor, topk: int, moe_metadata: MoeMetadata | None = None, *,
                            renormalize: bool = False) -> tuple[Tensor, Tensor]:
    """Softmax over experts (float32), then the ``topk`` largest: ``(weights float32, expert ids int64)``, each
    ``(..., topk)``. The weights are not renormalised (LMDeploy renormalises in ``fused_moe``); ``renormalize=True``
    (keyword, or a bool in ``moe_metadata``'s place as LMDeploy 0.7 passed it) makes each token's weights sum
    to 1. ``moe_metadata`` (:class:`dlinfer.utils.type_annotation.MoeMetadata`) must describe one device."""
    op = "moe_gating_topk_softmax"
    if isinstance(moe_metadata, bool):
        renormalize, moe_metadata = moe_metadata or renormalize, None
    elif moe_metadata is not None and not hasattr(moe_metadata, "ep_size"):
        raise TypeError(f"{op}: moe_metadata must be a dlinfer MoeMetadata (or None), got "
                        f"{type(moe_metadata).__name__}")
    _check_moe_metadata(op, moe_metadata)
    return call(_moe_gating, router_logits, _int(topk), bool(renormalize))


def fused_moe(hidden_states: Tensor, gate_up_weights: Tensor, down_weights: Tensor, topk_weights: Tensor,
              topk_ids: Tensor, topk: int, renormalize: bool = False, moe_metadata: MoeMetadata | None = None,
              chunked_moe_layout: Any = None) -> Tensor:
    """Mixture of experts on ``hidden_states`` ``(num_tokens, hidden)``: ``gate_up_weights`` ``(num_experts,
    2 * intermediate, hidden)`` (gate rows first), ``down_weights`` ``(num_experts, hidden, intermediate)``;
    ``sum_k topk_weights[:, k] * down_e(silu(gate_e x) * up_e x)`` with ``e = topk_ids[:, k]`` (the weights
    renormalised first when ``renormalize``). ``moe_metadata`` must describe one device; a chunked expert layout
    (Ascend's) is not implemented."""
    op = "fused_moe"
    _check_moe_metadata(op, moe_metadata)
    if chunked_moe_layout is not None:
        raise NotImplementedError(f"{op}: chunked_moe_layout ({type(chunked_moe_layout).__name__}) is not "
                                  "implemented: dlinfer's experts are stored one per row")
    return call(_fused_moe, hidden_states, gate_up_weights, down_weights, topk_weights, topk_ids, _int(topk),
                              bool(renormalize))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, all_reduce: bool = False,
           group: str | None = "") -> Tensor:
    """``x @ weight.T + bias`` (``weight`` ``(out, in)``; ``(in, out)`` under ``DLINFER_LINEAR_USE_NN_LAYOUT=1``,
    as LMDeploy stores it then); ``all_reduce`` sums the result over the process group named ``group`` (``""``:
    the default group) for tensor parallelism."""
    if dlinfer_config().linear_nn_layout:
        weight = weight.t()
    if all_reduce and group:
        raise NotImplementedError(f"linear: all_reduce over the process group {group!r} is not implemented (only "
                                  "the default group, group='')")
    return call(_linear, x, weight, bias, bool(all_reduce))


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
