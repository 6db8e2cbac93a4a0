"""onnxgraph converters of PyTorch's CPU flash attention, forward and backward (contract: conversion.py).

``aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, *, attn_mask, scale)`` returns
``(out, logsumexp)``, ``logsumexp`` of shape ``(batch, heads, seq_q)`` in float32 for float16/bfloat16 inputs;
its backward takes both and returns ``(grad_q, grad_k, grad_v)``. Both are expanded into ``MatMul``, ``Exp``,
``ReduceMax``/``ReduceSum`` (4-d ``(batch, heads, seq, dim)``, causal top-left aligned as torch, an additive
float or boolean mask, grouped-query heads: key/value heads repeated, their gradients summed per group). The
backward recomputes the probabilities from ``q``, ``k`` and ``logsumexp`` (``exp(scores - logsumexp)``).
``dropout_p != 0`` is declined (random: the node runs eagerly).
"""

from __future__ import annotations

from typing import Any

import torch

from .codegen import ConversionContext, compute_dtype, onnx_dtype
from .convert_common import aten, register

__all__ = ["flash_attention_backward", "flash_attention_forward"]

_FORWARD = aten._scaled_dot_product_flash_attention_for_cpu.default
_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def _arg(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _supported(node: torch.fx.Node) -> str | None:
    """Decline dropout and ranks other than 4."""
    first = 1 if node.target is _BACKWARD else 0
    dropout_p = _arg(node, 6, "dropout_p", 0.0) if first else _arg(node, 3, "dropout_p", 0.0)
    if not isinstance(dropout_p, (int, float)) or dropout_p != 0:
        return f"dropout_p={dropout_p} (random; only dropout_p == 0 is converted)"
    q, k = (a.meta.get("val") for a in node.args[first:first + 2])
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
        return "query/key without metadata"
    if q.dim() != 4 or k.dim() != 4:
        return "attention on tensors of rank other than 4"
    return None


class _Heads:
    """Query heads per key/value head (``groups``): static ints when both head counts are, else ONNX values read
    at run time (no guard)."""

    def __init__(self, ctx: ConversionContext, q: str, k: str) -> None:
        first = 1 if ctx.node.target is _BACKWARD else 0
        q_val, k_val = (a.meta["val"] for a in ctx.node.args[first:first + 2])
        self.static = type(q_val.shape[1]) is int and type(k_val.shape[1]) is int
        if self.static:
            self.q, self.kv = q_val.shape[1], k_val.shape[1]
            self.groups: Any = self.q // self.kv
        else:
            self.q, self.kv = ctx.shape_of(q, start=1, end=2), ctx.shape_of(k, start=1, end=2)
            self.groups = ctx.emit("Div", [self.q, self.kv], dtype=torch.int64)

    @property
    def grouped(self) -> bool:
        """False when key/value heads equal the query heads (known statically)."""
        return not self.static or self.groups != 1

    def sizes(self, ctx: ConversionContext, *parts: int | str) -> str:
        """A 1-D int64 value from ints and 1-D int64 values (``_Heads`` members or shapes)."""
        if all(isinstance(p, int) for p in parts):
            return ctx.const(list(parts), torch.int64)
        pieces = [ctx.const([p], torch.int64) if isinstance(p, int) else p for p in parts]
        return ctx.emit("Concat", pieces, axis=0, dtype=torch.int64)

    def repeat(self, ctx: ConversionContext, x: str) -> str:
        """(batch, kv heads, seq, dim) -> (batch, q heads, seq, dim): kv head h serves query heads h*groups ..."""
        expanded = ctx.emit("Expand", [ctx.emit("Unsqueeze", [x, ctx.const([2], torch.int64)]),
                                       self.sizes(ctx, 1, 1, self.groups, 1, 1)])
        return ctx.emit("Reshape", [expanded, self.sizes(ctx, 0, self.q, -1, ctx.shape_of(x, start=3))])

    def sum_groups(self, ctx: ConversionContext, x: str) -> str:
        """(batch, q heads, seq, dim) -> (batch, kv heads, seq, dim), summing the query heads of each kv head."""
        sizes = self.sizes(ctx, 0, self.kv, self.groups, -1, ctx.shape_of(x, start=3))
        return ctx.emit("ReduceSum", [ctx.emit("Reshape", [x, sizes]), ctx.const([2], torch.int64)], keepdims=0)


def _scores(ctx: ConversionContext, q: str, k: str, mask: str | None, scale: Any, is_causal: bool,
            cd: torch.dtype) -> tuple[str, str]:
    """(scaled, masked scores ``(batch, heads, seq_q, seq_k)``, the scale factor as a 0-d value)."""
    if scale is None:  # 1/sqrt(dim), the dimension read at run time
        dim = ctx.emit("Cast", [ctx.shape_of(q, start=3)], to=onnx_dtype(cd))
        factor = ctx.emit("Reshape", [ctx.emit("Reciprocal", [ctx.emit("Sqrt", [dim])]),
                                      ctx.const([], torch.int64)])
    else:
        factor = ctx.const(float(scale), cd)
    scores = ctx.emit("Mul", [ctx.emit("MatMul", [q, ctx.emit("Transpose", [k], perm=[0, 1, 3, 2])]), factor])
    minus_inf = ctx.const(float("-inf"), cd)
    if is_causal:  # top-left aligned, as torch: key j is visible to query i when j <= i
        zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
        rows = ctx.emit("Range", [zero, ctx.emit("Squeeze", [ctx.shape_of(q, start=2, end=3)]), one])
        cols = ctx.emit("Range", [zero, ctx.emit("Squeeze", [ctx.shape_of(k, start=2, end=3)]), one])
        visible = ctx.emit("LessOrEqual", [cols, ctx.emit("Unsqueeze", [rows, ctx.const([1], torch.int64)])])
        scores = ctx.emit("Where", [visible, scores, minus_inf])
    if mask is not None:
        scores = (ctx.emit("Where", [mask, scores, minus_inf]) if ctx.torch_dtype_of(mask) == torch.bool
                  else ctx.emit("Add", [scores, ctx.cast(mask, cd)]))
    return scores, factor


def _inputs(ctx: ConversionContext, q: str, k: str, v: str, dtype: torch.dtype) -> tuple[str, str, str, _Heads]:
    """q, k, v in ``dtype`` with key/value heads repeated to the query heads, and the head counts."""
    q, k, v = (ctx.cast(t, dtype) for t in (q, k, v))
    heads = _Heads(ctx, q, k)
    if heads.grouped:
        k, v = heads.repeat(ctx, k), heads.repeat(ctx, v)
    return q, k, v, heads


@register(_FORWARD, supports=_supported)
def flash_attention_forward(ctx: ConversionContext, q: str, k: str, v: str, dropout_p: float = 0.0,
                            is_causal: bool = False, *, attn_mask: str | None = None, scale: float | None = None
                            ) -> list[str]:
    """``(out, logsumexp)``: ``softmax(scale * q k^T + mask) v`` and the rows' log-sum-exp of the scores."""
    dtype, lse_dtype = ctx.out[0].dtype, ctx.out[1].dtype
    cd = compute_dtype(dtype)
    q, k, v, _ = _inputs(ctx, q, k, v, dtype)
    scores, _ = _scores(ctx, q, k, attn_mask, scale, is_causal, cd)
    last = ctx.const([-1], torch.int64)
    top = ctx.emit("ReduceMax", [scores, last], keepdims=1)
    exp = ctx.emit("Exp", [ctx.emit("Sub", [scores, top])])
    total = ctx.emit("ReduceSum", [exp, last], keepdims=1)
    out = ctx.emit("MatMul", [ctx.emit("Div", [exp, total]), v], dtype=cd)
    lse = ctx.emit("Squeeze", [ctx.emit("Add", [top, ctx.emit("Log", [total])]), last], dtype=cd)
    return [ctx.cast(out, dtype), ctx.cast(lse, lse_dtype)]


@register(_BACKWARD, supports=_supported)
def flash_attention_backward(ctx: ConversionContext, grad_out: str, q: str, k: str, v: str, out: str, lse: str,
                             dropout_p: float, is_causal: bool, *, attn_mask: str | None = None,
                             scale: float | None = None) -> list[str]:
    """``(grad_q, grad_k, grad_v)``, the probabilities recomputed as ``exp(scores - logsumexp)``."""
    dtype = ctx.out[0].dtype
    cd = compute_dtype(dtype)
    q, k, v, heads = _inputs(ctx, q, k, v, dtype)
    grad_out, out = ctx.cast(grad_out, dtype), ctx.cast(out, dtype)
    scores, factor = _scores(ctx, q, k, attn_mask, scale, is_causal, cd)
    last = ctx.const([-1], torch.int64)
    probs = ctx.emit("Exp", [ctx.emit("Sub", [scores, ctx.emit("Unsqueeze", [ctx.cast(lse, cd), last])])])
    grad_v = ctx.emit("MatMul", [ctx.emit("Transpose", [probs], perm=[0, 1, 3, 2]), grad_out])
    grad_probs = ctx.emit("MatMul", [grad_out, ctx.emit("Transpose", [v], perm=[0, 1, 3, 2])])
    row_dot = ctx.emit("ReduceSum", [ctx.emit("Mul", [grad_out, out]), last], keepdims=1)
    grad_scores = ctx.emit("Mul", [ctx.emit("Mul", [probs, ctx.emit("Sub", [grad_probs, row_dot])]), factor])
    grad_q = ctx.emit("MatMul", [grad_scores, k], dtype=cd)
    grad_k = ctx.emit("MatMul", [ctx.emit("Transpose", [grad_scores], perm=[0, 1, 3, 2]), q])
    if heads.grouped:
        grad_k, grad_v = heads.sum_groups(ctx, grad_k), heads.sum_groups(ctx, grad_v)
    grad_k = ctx.emit("Identity", [grad_k], dtype=cd)
    grad_v = ctx.emit("Identity", [grad_v], dtype=cd)
    return [ctx.cast(g, dtype) for g in (grad_q, grad_k, grad_v)]
