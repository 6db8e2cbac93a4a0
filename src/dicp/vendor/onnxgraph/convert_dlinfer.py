"""onnxgraph converters of dlinfer's LLM operators (``torch.ops.dlinfer.*``; contract: conversion.py).

Each operator becomes ONNX fused operators where ONNX has one, else a small subgraph, never a torch
decomposition (docs/dlinfer.md "Graph mode"):

- ``rms_norm`` -> ``RMSNormalization``; ``add_rms_norm`` -> ``Add, RMSNormalization``;
- ``apply_rotary_pos_emb`` -> ``RotaryEmbedding`` on token-packed ``(tokens, heads, dim)`` query/key with
  ``cos``/``sin`` ``(tokens, rotary_dim)`` (or batched ``(batch, seq, heads, dim)`` with ``(batch, seq,
  rotary_dim)``) or ``position_ids`` + ``cos_sin_cache`` (partial rotary: ``Slice``, ``RotaryEmbedding``,
  ``Concat``); other layouts: ``Slice, Mul, Neg, Concat`` (rotate_half);
- ``prefill_attention`` -> a block-diagonal causal mask from ``q_start_loc``/``q_seq_len`` and ``Attention``;
- ``paged_decode_attention`` -> ``Gather`` of each sequence's blocks, a length mask and ``Attention``;
  ``paged_prefill_attention`` the same with each packed query token a batch entry (its sequence's blocks, visible
  up to its own position);
- ``fill_kv_cache`` (mutating) as AOTAutograd's ``auto_functionalized[_v2]`` node -> ``ScatterND`` producing
  the new caches (AOTAutograd copies them back into the inputs);
- ``silu_and_mul`` -> ``Split, Sigmoid, Mul, Mul``; ``linear`` -> ``MatMul`` (``Transpose`` of the weight,
  ``Add`` of the bias); ``moe_gating_topk_softmax`` -> ``Softmax, TopK`` (``ReduceSum, Div`` to renormalize);
  ``fused_moe`` -> dense ``Einsum`` over every expert with a ``ScatterElements`` combine matrix;
- W8A8: ``dynamic_quant`` / ``rms_norm_w8a8`` / ``add_rms_norm_w8a8`` -> ``Round, Clip`` per token,
  ``linear_w8a8`` -> ``MatMulInteger``; W4A16 ``weight_quant_matmul`` -> ``BitwiseAnd, BitShift`` unpacking and
  ``MatMul``.

The int8 KV cache (``quant_bits=8``) is quantized (``fill_kv_cache``) and dequantized (the paged attentions) with
the scheme of ``dlinfer.ops.llm``. Declined (the node stays one eager node): ALiBi slopes, explicit ``attn_mask``
lists, ``all_reduce=True``, quantization dtypes other than int8. float16/bfloat16 compute in float32 and round
to the operator's output dtype, as the reference kernels do at their outputs. Sizes are read at run time
(``Shape``), never from a SymInt, so no guard is added.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

import dlinfer.ops  # noqa: F401  (defines torch.ops.dlinfer.*)

from .codegen import ConversionContext
from .convert_common import register

__all__ = ["MUTATING"]

dl = torch.ops.dlinfer
_HOPS = tuple(getattr(torch.ops.higher_order, n) for n in ("auto_functionalized", "auto_functionalized_v2")
              if hasattr(torch.ops.higher_order, n))


def _fused(ctx: ConversionContext) -> bool:
    """Whether the graph's opset has ONNX's fused operators (``fused.FUSED_OPSET``; imported here: ``fused``
    imports the registry, which imports this module)."""
    from .fused import FUSED_OPSET

    return ctx.opset >= FUSED_OPSET


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` (position ``index`` in the schema) of ``node``."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _val(node: torch.fx.Node, index: int, name: str) -> Any:
    a = _arg(node, index, name)
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


def _round(ctx: ConversionContext, name: str, dtype: torch.dtype) -> str:
    """``name`` (computed in float32) as the operator's output ``dtype`` (rounds through a half type)."""
    return ctx.cast(name, dtype)


def _i64(ctx: ConversionContext, values: list[int]) -> str:
    return ctx.const(values, torch.int64)


def _quant_ok(index: int, names: tuple[str, ...]) -> Callable[[torch.fx.Node], str | None]:
    """``quant_bits`` (position ``index``) 0, or 8 with the four scale/zero tensors (positions before it)."""
    def check(node: torch.fx.Node) -> str | None:
        bits = _arg(node, index, "quant_bits", 0)
        if bits in (0, None):
            return None
        if bits != 8:
            return f"quant_bits={bits} (0 or 8)"
        if any(_arg(node, index - 4 + i, n) is None for i, n in enumerate(names)):
            return "quant_bits=8 without k_scale/k_zero/v_scale/v_zero"
        return None
    return check


_SCALES = ("k_scale", "k_zero", "v_scale", "v_zero")


def _no_alibi(index: int) -> str | None:
    def check(node: torch.fx.Node) -> str | None:
        return "alibi_slopes (runs eagerly)" if _arg(node, index, "alibi_slopes") is not None else None
    return check


def _all(*checks: Callable[[torch.fx.Node], str | None]) -> Callable[[torch.fx.Node], str | None]:
    def check(node: torch.fx.Node) -> str | None:
        for c in checks:
            reason = c(node)
            if reason:
                return reason
        return None
    return check


# -- normalization ---------------------------------------------------------------------------------------------
def _rms(ctx: ConversionContext, h: str, weight: str, eps: Any, dtype: torch.dtype) -> str:
    """The reference's order: float32 statistics, the normalized value rounded to ``dtype``, then times the weight
    (in float32 a single ``RMSNormalization``)."""
    h = ctx.cast(h, torch.float32)
    if _fused(ctx) and dtype == torch.float32:
        return ctx.emit("RMSNormalization", [h, ctx.cast(weight, torch.float32)], axis=-1, epsilon=float(eps),
                        stash_type=1, dtype=torch.float32)
    mean = ctx.emit("ReduceMean", [ctx.emit("Mul", [h, h]), _i64(ctx, [-1])], keepdims=1)
    rms = ctx.emit("Sqrt", [ctx.emit("Add", [mean, ctx.const(float(eps), torch.float32)])])
    normed = _round(ctx, ctx.emit("Div", [h, rms], dtype=torch.float32), dtype)
    return _round(ctx, ctx.emit("Mul", [ctx.cast(weight, torch.float32), normed], dtype=torch.float32), dtype)


def _float_eps(index: int) -> Callable[[torch.fx.Node], str | None]:
    def check(node: torch.fx.Node) -> str | None:
        eps = _arg(node, index, "epsilon")
        return None if isinstance(eps, (int, float)) else "a symbolic epsilon"
    return check


@register(dl.rms_norm.default, supports=_float_eps(2))
def rms_norm(ctx: ConversionContext, h: str, weight: str, eps: float) -> str:
    return _rms(ctx, h, weight, eps, ctx.out.dtype)


@register(dl.add_rms_norm.default, supports=_float_eps(3))
def add_rms_norm(ctx: ConversionContext, h: str, residual: str, weight: str, eps: float) -> list[str]:
    dtype = ctx.out[1].dtype
    added = _round(ctx, ctx.emit("Add", [ctx.cast(h, torch.float32), ctx.cast(residual, torch.float32)],
                                 dtype=torch.float32), dtype)
    return [_rms(ctx, added, weight, eps, ctx.out[0].dtype), added]


# -- rotary ----------------------------------------------------------------------------------------------------
def _rotary_supported(node: torch.fx.Node) -> str | None:
    q, k = _val(node, 0, "query"), _val(node, 1, "key")
    cos, cache = _val(node, 2, "cos"), _val(node, 5, "cos_sin_cache")
    table = cos if cos is not None else cache
    if table is None or (cos is None and _val(node, 4, "position_ids") is None):
        return "neither cos/sin nor position_ids with cos_sin_cache"
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)) or q.dim() < 2:
        return "query/key without metadata"
    return None


def _rotary_full(node: torch.fx.Node) -> bool:
    """Whether cos/sin provably cover the whole head dimension of query and key (decided without a guard)."""
    q, k = _val(node, 0, "query"), _val(node, 1, "key")
    cos = _val(node, 2, "cos")
    rot = (cos if cos is not None else _val(node, 5, "cos_sin_cache")).shape[-1]
    return statically_known_true(rot == q.shape[-1]) and statically_known_true(rot == k.shape[-1])


def _rotary_native(node: torch.fx.Node) -> bool:
    """``RotaryEmbedding`` takes query/key ``(tokens, heads, dim)`` with cos/sin ``(tokens, rot)`` (or position ids
    ``(tokens,)`` into a 2-D cache), or ``(batch, seq, heads, dim)`` with ``(batch, seq, rot)`` (ids ``(batch,
    seq)``)."""
    q, k = _val(node, 0, "query"), _val(node, 1, "key")
    if q.dim() not in (3, 4) or k.dim() != q.dim():
        return False
    cos = _val(node, 2, "cos")
    if cos is not None:
        return cos.dim() == q.dim() - 1 and _val(node, 3, "sin").dim() == q.dim() - 1
    return _val(node, 4, "position_ids").dim() == q.dim() - 2 and _val(node, 5, "cos_sin_cache").dim() == 2


def _rotate_expand(ctx: ConversionContext, x: str, per_head: bool, cos: str, sin: str) -> str:
    """``x * cos + rotate_half(x) * sin`` on the first ``rot`` features (``rot``: ``cos``'s last size, read at run
    time); ``cos``/``sin`` ``(..., rot)`` broadcast over the head dimension (second to last of ``x``) unless
    ``per_head`` (they have it already)."""
    axis = _i64(ctx, [-1])
    rot = ctx.shape_of(cos, start=-1)
    half = ctx.emit("Div", [rot, _i64(ctx, [2])], dtype=torch.int64)
    if not per_head:
        cos, sin = (ctx.emit("Unsqueeze", [t, _i64(ctx, [-2])]) for t in (cos, sin))
    zero = _i64(ctx, [0])
    xr = ctx.emit("Slice", [x, zero, rot, axis])
    x1 = ctx.emit("Slice", [xr, zero, half, axis])
    x2 = ctx.emit("Slice", [xr, half, rot, axis])
    rotated = ctx.emit("Concat", [ctx.emit("Neg", [x2]), x1], axis=-1)
    out = ctx.emit("Add", [ctx.emit("Mul", [xr, cos]), ctx.emit("Mul", [rotated, sin])], dtype=torch.float32)
    rest = ctx.emit("Slice", [x, rot, _i64(ctx, [2**62]), axis])
    return ctx.emit("Concat", [out, rest], axis=-1, dtype=torch.float32)


@register(dl.apply_rotary_pos_emb.default, supports=_rotary_supported)
def apply_rotary_pos_emb(ctx: ConversionContext, q: str, k: str, cos: str | None, sin: str | None,
                         position_ids: str | None, cos_sin_cache: str | None) -> list[str]:
    node = ctx.node
    table = _val(node, 2, "cos") if cos is not None else _val(node, 5, "cos_sin_cache")
    dtypes = [v.dtype for v in ctx.out]
    q, k = ctx.cast(q, torch.float32), ctx.cast(k, torch.float32)
    if cos is not None:
        cos, sin = ctx.cast(cos, torch.float32), ctx.cast(sin, torch.float32)
    else:
        cache = ctx.cast(cos_sin_cache, torch.float32)
    if _fused(ctx) and _rotary_native(node):
        # (T, H, D) is a batch of one: (1, T, H, D); (B, S, H, D) -> (B, H, S, D) for RotaryEmbedding, whose
        # cos/sin caches are the first half of HF's duplicated layout, (B, S, rot / 2)
        packed = _val(node, 0, "query").dim() == 3
        first = _i64(ctx, [0])
        if cos is not None:
            half = ctx.emit("Div", [ctx.shape_of(cos, start=-1), _i64(ctx, [2])], dtype=torch.int64)
            tail: list[str | None] = [ctx.emit("Slice", [t, first, half, _i64(ctx, [-1])]) for t in (cos, sin)]
            if packed:
                tail = [ctx.emit("Unsqueeze", [t, first]) for t in tail]
            pos = None
        else:
            tail = ctx.emit("Split", [cache], outputs=2, axis=-1, num_outputs=2)
            pos = ctx.cast(position_ids, torch.int64)
            if packed:
                pos = ctx.emit("Unsqueeze", [pos, first])
        full = _rotary_full(node)
        rot = ctx.emit("Mul", [ctx.shape_of(tail[0], start=-1), _i64(ctx, [2])], dtype=torch.int64)
        outs = []
        for x in (q, k):
            x4 = ctx.emit("Unsqueeze", [x, first]) if packed else x
            # partial rotary (or a rotary size not provably the head size): rotate the first `rot` features
            xr = x4 if full else ctx.emit("Slice", [x4, first, rot, _i64(ctx, [-1])])
            y = ctx.emit("RotaryEmbedding", [ctx.emit("Transpose", [xr], perm=[0, 2, 1, 3]), *tail, pos],
                         interleaved=0, dtype=torch.float32)
            y = ctx.emit("Transpose", [y], perm=[0, 2, 1, 3], dtype=torch.float32)
            if not full:
                rest = ctx.emit("Slice", [x4, rot, _i64(ctx, [2**62]), _i64(ctx, [-1])])
                y = ctx.emit("Concat", [y, rest], axis=-1, dtype=torch.float32)
            outs.append(ctx.emit("Squeeze", [y, first], dtype=torch.float32) if packed else y)
        return [_round(ctx, o, d) for o, d in zip(outs, dtypes, strict=True)]
    if cos is None:  # gather [cos_half | sin_half] rows, duplicate each half (HF's layout)
        rows = ctx.emit("Gather", [cache, ctx.cast(position_ids, torch.int64)], axis=0)
        c, s = ctx.emit("Split", [rows], outputs=2, axis=-1, num_outputs=2)
        cos, sin = (ctx.emit("Concat", [t, t], axis=-1) for t in (c, s))
    table_rank = table.dim() if _val(node, 2, "cos") is not None else _val(node, 4, "position_ids").dim() + 1
    ranks = (_val(node, 0, "query").dim(), _val(node, 1, "key").dim())
    outs = [_rotate_expand(ctx, x, r == table_rank, cos, sin) for x, r in zip((q, k), ranks, strict=True)]
    return [_round(ctx, o, d) for o, d in zip(outs, dtypes, strict=True)]


# -- attention -------------------------------------------------------------------------------------------------
def _prefill_supported(node: torch.fx.Node) -> str | None:
    if _arg(node, 8, "attn_mask"):
        return "an explicit attn_mask list (runs eagerly)"
    q = _val(node, 0, "query")
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        return "query of rank other than 3"
    return _no_alibi(10)(node)


def _heads_first(ctx: ConversionContext, x: str) -> str:
    """(T, H, D) -> (1, H, T, D)."""
    return ctx.emit("Unsqueeze", [ctx.emit("Transpose", [x], perm=[1, 0, 2]), _i64(ctx, [0])])


def _attention(ctx: ConversionContext, q: str, k: str, v: str, mask: str, scale: Any) -> str:
    return ctx.emit("Attention", [q, k, v, mask], scale=None if scale is None else float(scale), is_causal=0,
                    dtype=torch.float32)


@register(dl.prefill_attention.default, supports=_prefill_supported)
def prefill_attention(ctx: ConversionContext, q: str, k: str, v: str, q_start_loc: str, q_seq_len: str,
                      max_q_seq_len: Any, num_q_heads: Any, num_kv_heads: Any, attn_mask: Any,
                      softmax_scale: float | None = None, alibi_slopes: Any = None) -> str:
    dtype = ctx.out.dtype
    q, k, v = (_heads_first(ctx, ctx.cast(t, torch.float32)) for t in (q, k, v))
    # token t belongs to sequence b when start[b] <= t < start[b] + len[b]; visible: same sequence, j <= i
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    tokens = ctx.emit("Squeeze", [ctx.shape_of(q, start=2, end=3), _i64(ctx, [0])])
    t = ctx.emit("Unsqueeze", [ctx.emit("Range", [zero, tokens, one]), _i64(ctx, [1])])  # (T, 1)
    start = ctx.cast(q_start_loc, torch.int64)
    end = ctx.emit("Add", [start, ctx.cast(q_seq_len, torch.int64)])
    member = ctx.emit("And", [ctx.emit("GreaterOrEqual", [t, start]), ctx.emit("Less", [t, end])])  # (T, B)
    member_f = ctx.emit("Cast", [member], to=1)
    same = ctx.emit("Greater", [ctx.emit("MatMul", [member_f, ctx.emit("Transpose", [member_f], perm=[1, 0])]),
                                ctx.const(0.0, torch.float32)])
    causal = ctx.emit("LessOrEqual", [ctx.emit("Transpose", [t], perm=[1, 0]), t])  # [i, j]: j <= i
    mask = ctx.emit("And", [same, causal])
    out = _attention(ctx, q, k, v, mask, softmax_scale)
    out = ctx.emit("Transpose", [ctx.emit("Squeeze", [out, _i64(ctx, [0])])], perm=[1, 0, 2], dtype=torch.float32)
    return _round(ctx, out, dtype)


def _decode_supported(node: torch.fx.Node) -> str | None:
    q, kc = _val(node, 0, "query"), _val(node, 1, "key_cache")
    if not isinstance(q, torch.Tensor) or q.dim() != 3 or not isinstance(kc, torch.Tensor) or kc.dim() != 4:
        return "query/cache of unexpected rank"
    return _all(_no_alibi(10), _quant_ok(15, _SCALES))(node)


def _gather_blocks(ctx: ConversionContext, cache: str, block_table: str) -> str:
    """(num_blocks, block_size, H, D)[block_table] -> (B, H, max_blocks * block_size, D); a scale/zero tensor
    (num_blocks, block_size, H) -> (B, H, max_blocks * block_size, 1)."""
    if ctx.rank_of(cache) == 3:
        cache = ctx.emit("Unsqueeze", [cache, _i64(ctx, [-1])])
    blocks = ctx.emit("Gather", [cache, ctx.cast(block_table, torch.int64)], axis=0)  # (B, MB, BS, H, D)
    sizes = ctx.emit("Concat", [ctx.shape_of(blocks, start=0, end=1), _i64(ctx, [-1]), ctx.shape_of(blocks, start=3)],
                     axis=0, dtype=torch.int64)
    flat = ctx.emit("Reshape", [blocks, sizes])
    return ctx.emit("Transpose", [flat], perm=[0, 2, 1, 3])


def _gather_kv(ctx: ConversionContext, key_cache: str, value_cache: str, block_table: str, quant: Any,
               dtype: torch.dtype) -> tuple[str, str]:
    """Each sequence's keys and values (B, H, L, D) in float32; an int8 cache dequantized, ``(q - zero) * scale``,
    and rounded to the query's ``dtype`` as the reference does. ``quant``: (bits, k_scale, k_zero, v_scale,
    v_zero)."""
    bits, *scales = quant
    out = []
    for i, cache in enumerate((key_cache, value_cache)):
        x = _gather_blocks(ctx, ctx.cast(cache, torch.float32), block_table)
        if bits == 8:
            scale, zero = (_gather_blocks(ctx, ctx.cast(t, torch.float32), block_table)
                           for t in scales[2 * i:2 * i + 2])
            x = _round(ctx, ctx.emit("Mul", [ctx.emit("Sub", [x, zero]), scale], dtype=torch.float32), dtype)
        out.append(x)
    return out[0], out[1]


@register(dl.paged_decode_attention.default, supports=_decode_supported)
def paged_decode_attention(ctx: ConversionContext, q: str, key_cache: str, value_cache: str, block_table: str,
                           block_size: Any, kv_seq_len: str, max_kv_seq_len: Any, num_q_heads: Any,
                           num_kv_heads: Any, softmax_scale: float | None = None, *rest: Any) -> str:
    dtype = ctx.out.dtype
    k_scale, k_zero, v_scale, v_zero, bits = (list(rest) + [None] * 6)[1:6]
    k, v = _gather_kv(ctx, key_cache, value_cache, block_table, (bits, k_scale, k_zero, v_scale, v_zero), dtype)
    q4 = ctx.emit("Unsqueeze", [ctx.cast(q, torch.float32), _i64(ctx, [2])])  # (B, Hq, 1, D)
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    length = ctx.emit("Squeeze", [ctx.shape_of(k, start=2, end=3), _i64(ctx, [0])])
    pos = ctx.emit("Range", [zero, length, one])  # (L,)
    lens = ctx.emit("Unsqueeze", [ctx.cast(kv_seq_len, torch.int64), _i64(ctx, [1, 2, 3])])  # (B, 1, 1, 1)
    mask = ctx.emit("Less", [pos, lens])  # (B, 1, 1, L)
    out = _attention(ctx, q4, k, v, mask, softmax_scale)
    return _round(ctx, ctx.emit("Squeeze", [out, _i64(ctx, [2])], dtype=torch.float32), dtype)


def _paged_prefill_supported(node: torch.fx.Node) -> str | None:
    if _arg(node, 13, "attn_mask"):
        return "an explicit attn_mask list (runs eagerly)"
    q, kc = _val(node, 0, "query"), _val(node, 3, "key_cache")
    if not isinstance(q, torch.Tensor) or q.dim() != 3 or not isinstance(kc, torch.Tensor) or kc.dim() != 4:
        return "query/cache of unexpected rank"
    return _all(_no_alibi(15), _quant_ok(20, _SCALES))(node)


@register(dl.paged_prefill_attention.default, supports=_paged_prefill_supported)
def paged_prefill_attention(ctx: ConversionContext, q: str, key: str, value: str, key_cache: str, value_cache: str,
                            block_table: str, block_size: Any, q_start_loc: str, q_seq_len: str, kv_seq_len: str,
                            max_q_seq_len: Any, num_q_heads: Any, num_kv_heads: Any, attn_mask: Any,
                            softmax_scale: float | None = None, *rest: Any) -> str:
    """Each packed query token is a batch entry of ``Attention``: its sequence's cached keys (which already hold
    the new ones), visible up to its own position ``kv_len - q_len + i``."""
    dtype = ctx.out.dtype
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    tokens = ctx.emit("Squeeze", [ctx.shape_of(q, start=0, end=1), _i64(ctx, [0])])
    t = ctx.emit("Range", [zero, tokens, one])  # (T,)
    t_col = ctx.emit("Unsqueeze", [t, _i64(ctx, [1])])
    start = ctx.cast(q_start_loc, torch.int64)
    q_len = ctx.cast(q_seq_len, torch.int64)
    kv_len = ctx.cast(kv_seq_len, torch.int64)
    member = ctx.emit("And", [ctx.emit("GreaterOrEqual", [t_col, start]),
                              ctx.emit("Less", [t_col, ctx.emit("Add", [start, q_len])])])  # (T, B)
    seq = ctx.emit("ArgMax", [ctx.emit("Cast", [member], to=6)], axis=1, keepdims=0)  # (T,) int64
    local = ctx.emit("Sub", [t, ctx.emit("Gather", [start, seq], axis=0)])
    q_pos = ctx.emit("Add", [ctx.emit("Gather", [ctx.emit("Sub", [kv_len, q_len]), seq], axis=0), local])
    k_scale, k_zero, v_scale, v_zero, bits = (list(rest) + [None] * 6)[1:6]
    k_all, v_all = _gather_kv(ctx, key_cache, value_cache, block_table, (bits, k_scale, k_zero, v_scale, v_zero),
                              dtype)
    k, v = (ctx.emit("Gather", [t, seq], axis=0) for t in (k_all, v_all))
    length = ctx.emit("Squeeze", [ctx.shape_of(k, start=2, end=3), _i64(ctx, [0])])
    k_pos = ctx.emit("Range", [zero, length, one])  # (L,)
    seen = ctx.emit("LessOrEqual", [k_pos, ctx.emit("Unsqueeze", [q_pos, _i64(ctx, [1])])])
    filled = ctx.emit("Less", [k_pos, ctx.emit("Unsqueeze", [ctx.emit("Gather", [kv_len, seq], axis=0),
                                                             _i64(ctx, [1])])])
    mask = ctx.emit("Unsqueeze", [ctx.emit("And", [seen, filled]), _i64(ctx, [1, 2])])  # (T, 1, 1, L)
    q4 = ctx.emit("Unsqueeze", [ctx.cast(q, torch.float32), _i64(ctx, [2])])  # (T, Hq, 1, D)
    out = _attention(ctx, q4, k, v, mask, softmax_scale)
    return _round(ctx, ctx.emit("Squeeze", [out, _i64(ctx, [2])], dtype=torch.float32), dtype)


# -- fill_kv_cache: the functional form AOTAutograd makes of the mutating operator ----------------------------------
_FILL = dl.fill_kv_cache.default


_MUTABLE = ("key_cache", "value_cache", "k_scale", "k_zero", "v_scale", "v_zero")


def _fill_kwargs(node: torch.fx.Node) -> str | None:
    """Why the ``auto_functionalized[_v2]`` node is not a ``fill_kv_cache`` on whole tensors, or None."""
    if not node.args or node.args[0] is not _FILL:
        op = node.args[0] if node.args else None
        return f"no conversion for the mutating operator {op}"
    kw = node.kwargs
    bits = kw.get("quant_bits", 0)
    if bits not in (0, 8, None):
        return f"quant_bits={bits} (0 or 8)"
    needed = _MUTABLE if bits == 8 else _MUTABLE[:2]
    if "_all_bases" in kw:
        if [n for n in kw if n.startswith(tuple(f"_{m}_" for m in _MUTABLE)) and not n.endswith("_base_index")]:
            return "caches that are views of another tensor (runs eagerly)"
        if any(kw.get(f"_{m}_base_index") is None for m in needed):
            return f"{', '.join(needed)} without a base"
    elif any(kw.get(m) is None for m in needed):
        return f"{', '.join(needed)} not all given"
    return None


MUTATING: dict[Any, Callable[[torch.fx.Node], str | None]] = {_FILL: _fill_kwargs}


def _mutation_supported(node: torch.fx.Node) -> str | None:
    op = node.args[0] if node.args else None
    check = MUTATING.get(op)
    return check(node) if check is not None else f"no conversion for the mutating operator {op}"


def _scatter(ctx: ConversionContext, cache: str, cache_val: torch.Tensor, indices: str, updates: str) -> str:
    """``cache.view(num_blocks * block_size, ...)[indices] = updates``, as a new tensor."""
    dtype = cache_val.dtype
    shape = ctx.shape_of(cache)
    flat = ctx.emit("Reshape", [cache, ctx.emit("Concat", [_i64(ctx, [-1]), ctx.shape_of(cache, start=2)], axis=0,
                                                dtype=torch.int64)])
    idx = ctx.emit("Unsqueeze", [ctx.cast(indices, torch.int64), _i64(ctx, [-1])])
    scattered = ctx.emit("ScatterND", [flat, idx, ctx.cast(updates, dtype)])
    return ctx.emit("Reshape", [scattered, shape], dtype=dtype)


def _quantize_kv(ctx: ConversionContext, x: str) -> list[str]:
    """The int8 cache scheme of ``dlinfer.ops.llm`` per (token, head): ``scale = max((max - min) / 255, 1e-8)``,
    ``zero = round(-min / scale) - 128``, ``q = clip(round(x / scale) + zero, -128, 127)``: (q, scale, zero)."""
    x = ctx.cast(x, torch.float32)
    axis = _i64(ctx, [-1])
    lo = ctx.emit("ReduceMin", [x, axis], keepdims=0)
    hi = ctx.emit("ReduceMax", [x, axis], keepdims=0)
    scale = ctx.emit("Max", [ctx.emit("Div", [ctx.emit("Sub", [hi, lo]), ctx.const(255.0, torch.float32)]),
                             ctx.const(1e-8, torch.float32)], dtype=torch.float32)
    zero = ctx.emit("Sub", [ctx.emit("Round", [ctx.emit("Div", [ctx.emit("Neg", [lo]), scale])]),
                            ctx.const(128.0, torch.float32)], dtype=torch.float32)
    q = ctx.emit("Add", [ctx.emit("Round", [ctx.emit("Div", [x, ctx.emit("Unsqueeze", [scale, axis])])]),
                         ctx.emit("Unsqueeze", [zero, axis])])
    q = ctx.emit("Clip", [q, ctx.const(-128.0, torch.float32), ctx.const(127.0, torch.float32)])
    return [ctx.cast(q, torch.int8), scale, zero]


def _fill_updates(ctx: ConversionContext, kwargs: dict[str, Any]) -> dict[str, str]:
    """Mutable argument name -> the values written at ``kv_indices``."""
    if kwargs.get("quant_bits", 0) != 8:
        return {"key_cache": kwargs["key"], "value_cache": kwargs["value"]}
    updates: dict[str, str] = {}
    for x, names in ((kwargs["key"], ("key_cache", "k_scale", "k_zero")),
                     (kwargs["value"], ("value_cache", "v_scale", "v_zero"))):
        updates.update(zip(names, _quantize_kv(ctx, x), strict=True))
    return updates


@register(list(_HOPS), supports=_mutation_supported)
def auto_functionalized(ctx: ConversionContext, op: Any, **kwargs: Any) -> list[str | None]:
    """``auto_functionalized[_v2](dlinfer.fill_kv_cache, ...)``: the op's (empty) outputs, then the new value of
    every mutated base (v2: ``_all_bases``; v1: each mutable argument in schema order, None where not given)."""
    vals = ctx.node.meta["val"]
    updates = _fill_updates(ctx, kwargs)
    if "_all_bases" in kwargs:
        bases = list(kwargs["_all_bases"])
        by_base = {kwargs.get(f"_{m}_base_index"): m for m in updates}
        n_out = len(vals) - len(bases)
        result: list[str | None] = [None] * n_out
        for i, base in enumerate(bases):
            name = by_base.get(i)
            result.append(base if name is None else
                          _scatter(ctx, base, vals[n_out + i], kwargs["kv_indices"], updates[name]))
        return result
    n_out = len(vals) - len(_MUTABLE)
    result = [None] * n_out
    for i, name in enumerate(_MUTABLE):
        base = kwargs.get(name)
        result.append(None if base is None else base if name not in updates else
                      _scatter(ctx, base, vals[n_out + i], kwargs["kv_indices"], updates[name]))
    return result


# -- MLP, linear, MoE ------------------------------------------------------------------------------------------
def _even_split(node: torch.fx.Node) -> str | None:
    x, dim = _val(node, 0, "input"), _arg(node, 1, "dim", -1)
    return None if isinstance(x, torch.Tensor) and isinstance(dim, int) else "a symbolic dim"


@register(dl.silu_and_mul.default, supports=_even_split)
def silu_and_mul(ctx: ConversionContext, x: str, dim: int = -1) -> str:
    dtype = ctx.out.dtype
    a, b = ctx.emit("Split", [ctx.cast(x, torch.float32)], outputs=2, axis=dim, num_outputs=2)
    out = ctx.emit("Mul", [ctx.emit("Mul", [a, ctx.emit("Sigmoid", [a])]), b], dtype=torch.float32)
    return _round(ctx, out, dtype)


def _no_all_reduce(node: torch.fx.Node) -> str | None:
    return "all_reduce=True (a collective; runs eagerly)" if _arg(node, 3, "all_reduce", False) else None


@register(dl.linear.default, supports=_no_all_reduce)
def linear(ctx: ConversionContext, x: str, weight: str, bias: str | None = None, all_reduce: bool = False) -> str:
    dtype = ctx.out.dtype
    wt = ctx.emit("Transpose", [ctx.cast(weight, torch.float32)], perm=[1, 0])
    out = ctx.emit("MatMul", [ctx.cast(x, torch.float32), wt], dtype=torch.float32)
    if bias is not None:
        out = ctx.emit("Add", [out, ctx.cast(bias, torch.float32)], dtype=torch.float32)
    return _round(ctx, out, dtype)


def _static_topk(node: torch.fx.Node) -> str | None:
    return None if type(_arg(node, 1, "topk")) is int else "a symbolic topk"


@register(dl.moe_gating_topk_softmax.default, supports=_static_topk)
def moe_gating_topk_softmax(ctx: ConversionContext, logits: str, topk: int, renormalize: bool = False
                            ) -> list[str]:
    probs = ctx.emit("Softmax", [ctx.cast(logits, torch.float32)], axis=-1)
    weights, ids = ctx.emit("TopK", [probs, _i64(ctx, [topk])], outputs=2, axis=-1, largest=1, sorted=1)
    if renormalize:
        weights = ctx.emit("Div", [weights, ctx.emit("ReduceSum", [weights, _i64(ctx, [-1])], keepdims=1)])
    return [weights, ids]


def _moe_supported(node: torch.fx.Node) -> str | None:
    h = _val(node, 0, "hidden_states")
    return None if isinstance(h, torch.Tensor) and h.dim() == 2 else "hidden_states of rank other than 2"


@register(dl.fused_moe.default, supports=_moe_supported)
def fused_moe(ctx: ConversionContext, h: str, gate_up: str, down: str, topk_weights: str, topk_ids: str,
              topk: Any, renormalize: bool = False) -> str:
    dtype = ctx.out.dtype
    x = ctx.cast(h, torch.float32)
    weights = ctx.cast(topk_weights, torch.float32)
    if renormalize:
        weights = ctx.emit("Div", [weights, ctx.emit("ReduceSum", [weights, _i64(ctx, [-1])], keepdims=1)])
    # every expert on every token (tiny models), combined with a (tokens, experts) matrix of routing weights
    gu = ctx.emit("Einsum", [x, ctx.cast(gate_up, torch.float32)], equation="th,eih->eti")
    gate, up = ctx.emit("Split", [gu], outputs=2, axis=-1, num_outputs=2)
    act = ctx.emit("Mul", [ctx.emit("Mul", [gate, ctx.emit("Sigmoid", [gate])]), up])
    outs = ctx.emit("Einsum", [act, ctx.cast(down, torch.float32)], equation="eti,ehi->eth")
    experts = ctx.shape_of(gate_up, start=0, end=1)
    zeros = ctx.emit("ConstantOfShape", [ctx.emit("Concat", [ctx.shape_of(x, start=0, end=1), experts], axis=0)])
    combine = ctx.emit("ScatterElements", [zeros, ctx.cast(topk_ids, torch.int64), weights], axis=1,
                       reduction="add")
    out = ctx.emit("Einsum", [combine, outs], equation="te,eth->th", dtype=torch.float32)
    return _round(ctx, out, dtype)


# -- W8A8 and W4A16 ------------------------------------------------------------------------------------------------
def _per_token(ctx: ConversionContext, x: str) -> list[str]:
    """Symmetric per-token int8 of float32 ``x``: ``scale = max(amax / 127, 1e-8)`` ``(..., 1)``, ``q =
    clip(round(x / scale), -127, 127)`` (``Round`` and ``torch.round`` both round half to even)."""
    amax = ctx.emit("ReduceMax", [ctx.emit("Abs", [x]), _i64(ctx, [-1])], keepdims=1)
    scale = ctx.emit("Max", [ctx.emit("Div", [amax, ctx.const(127.0, torch.float32)]),
                             ctx.const(1e-8, torch.float32)], dtype=torch.float32)
    q = ctx.emit("Clip", [ctx.emit("Round", [ctx.emit("Div", [x, scale])]), ctx.const(-127.0, torch.float32),
                          ctx.const(127.0, torch.float32)])
    return [ctx.cast(q, torch.int8), scale]


def _int8_quant(index: int) -> Callable[[torch.fx.Node], str | None]:
    def check(node: torch.fx.Node) -> str | None:
        qd = _arg(node, index, "quant_dtype")
        return None if qd in (None, torch.int8) else f"quant_dtype={qd} (int8 only)"
    return check


def _per_token_granularity(node: torch.fx.Node) -> str | None:
    gran = _arg(node, 2, "quant_granularity", "PER_TOKEN")
    return _int8_quant(1)(node) or (None if gran == "PER_TOKEN" else f"quant_granularity={gran!r}")


@register(dl.dynamic_quant.default, supports=_per_token_granularity)
def dynamic_quant(ctx: ConversionContext, x: str, quant_dtype: Any = None, quant_granularity: str = "PER_TOKEN"
                  ) -> list[str]:
    return _per_token(ctx, ctx.cast(x, torch.float32))


@register(dl.rms_norm_w8a8.default, supports=_all(_float_eps(2), _int8_quant(3)))
def rms_norm_w8a8(ctx: ConversionContext, h: str, weight: str, eps: float, quant_dtype: Any = None) -> list[str]:
    dtype = _val(ctx.node, 0, "hidden_states").dtype
    return _per_token(ctx, ctx.cast(_rms(ctx, h, weight, eps, dtype), torch.float32))


@register(dl.add_rms_norm_w8a8.default, supports=_all(_float_eps(3), _int8_quant(4)))
def add_rms_norm_w8a8(ctx: ConversionContext, h: str, residual: str, weight: str, eps: float,
                      quant_dtype: Any = None) -> list[str]:
    dtype = ctx.out[2].dtype
    added = _round(ctx, ctx.emit("Add", [ctx.cast(h, torch.float32), ctx.cast(residual, torch.float32)],
                                 dtype=torch.float32), dtype)
    return [*_per_token(ctx, ctx.cast(_rms(ctx, added, weight, eps, dtype), torch.float32)), added]


@register(dl.linear_w8a8.default, supports=_int8_quant(5))
def linear_w8a8(ctx: ConversionContext, a: str, b: str, rms_scale: str, linear_scale: str, out_dtype: Any,
                quant_dtype: Any = None, bias: str | None = None) -> str:
    """int8 x int8 accumulated in int32 (``MatMulInteger``), then the per-token and per-channel scales."""
    acc = ctx.emit("MatMulInteger", [a, ctx.emit("Transpose", [b], perm=[1, 0])], dtype=torch.int32)
    out = ctx.emit("Mul", [ctx.cast(acc, torch.float32), ctx.cast(rms_scale, torch.float32)])
    channel = ctx.emit("Reshape", [ctx.cast(linear_scale, torch.float32), _i64(ctx, [-1])])
    out = ctx.emit("Mul", [out, channel], dtype=torch.float32)
    if bias is not None:
        out = ctx.emit("Add", [out, ctx.cast(bias, torch.float32)], dtype=torch.float32)
    return _round(ctx, out, ctx.out.dtype)


def _w4a16_supported(node: torch.fx.Node) -> str | None:
    qweight, scale = _val(node, 1, "qweight"), _val(node, 2, "scale")
    if not isinstance(qweight, torch.Tensor) or qweight.dtype not in (torch.uint8, torch.int8) or qweight.dim() != 2:
        return "qweight other than 2-D uint8 (packed int4) or int8"
    group = _arg(node, 6, "group_size", 0)
    if type(group) is not int:
        return "a symbolic group_size"
    if not group and scale.dim() == 2 and not statically_known_true(scale.shape[0] == 1):
        return "a 2-D per-channel scale"
    return _no_all_reduce_at(5)(node)


def _no_all_reduce_at(index: int) -> Callable[[torch.fx.Node], str | None]:
    def check(node: torch.fx.Node) -> str | None:
        return "all_reduce=True (a collective; runs eagerly)" if _arg(node, index, "all_reduce", False) else None
    return check


@register(dl.weight_quant_matmul.default, supports=_w4a16_supported)
def weight_quant_matmul(ctx: ConversionContext, x: str, qweight: str, scale: str, offset: str | None = None,
                        bias: str | None = None, all_reduce: bool = False, group_size: int = 0) -> str:
    """``x @ ((q - offset) * scale)``: int4 nibbles unpacked (``BitwiseAnd``, ``BitShift``; low nibble = even
    column), per-channel or per-group scales expanded over the group's rows."""
    dtype = ctx.out.dtype
    packed = _val(ctx.node, 1, "qweight").dtype == torch.uint8
    if packed:
        low = ctx.emit("BitwiseAnd", [qweight, ctx.const(15, torch.uint8)])
        high = ctx.emit("BitShift", [qweight, ctx.const(4, torch.uint8)], direction="RIGHT")
        pairs = ctx.emit("Concat", [ctx.emit("Unsqueeze", [t, _i64(ctx, [-1])]) for t in (low, high)], axis=-1)
        q = ctx.emit("Reshape", [pairs, _i64(ctx, [0, -1])])
    else:
        q = qweight
    q = ctx.cast(q, torch.float32)
    s = ctx.cast(scale, torch.float32)
    z = ctx.const(8.0 if packed else 0.0, torch.float32) if offset is None else ctx.cast(offset, torch.float32)
    if group_size:  # (groups, out) -> (groups, group_size, out) -> (in, out)
        rows = _i64(ctx, [-1])
        out_cols = ctx.shape_of(q, start=1, end=2)
        sizes = ctx.emit("Concat", [ctx.shape_of(s, start=0, end=1), _i64(ctx, [group_size]), out_cols], axis=0)
        flat = ctx.emit("Concat", [rows, out_cols], axis=0)
        s, z = (ctx.emit("Reshape", [ctx.emit("Expand", [ctx.emit("Unsqueeze", [t, _i64(ctx, [1])]), sizes]), flat])
                if ctx.rank_of(t) == 2 else t for t in (s, z))
    else:
        s, z = (ctx.emit("Reshape", [t, _i64(ctx, [-1])]) if ctx.rank_of(t) else t for t in (s, z))
    w = _round(ctx, ctx.emit("Mul", [ctx.emit("Sub", [q, z]), s], dtype=torch.float32), dtype)
    out = ctx.emit("MatMul", [ctx.cast(x, torch.float32), ctx.cast(w, torch.float32)], dtype=torch.float32)
    if bias is not None:
        out = ctx.emit("Add", [_round(ctx, out, dtype), ctx.cast(bias, torch.float32)], dtype=torch.float32)
    return _round(ctx, out, dtype)
