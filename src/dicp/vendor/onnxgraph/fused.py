"""onnxgraph's fused patterns: which of dicp's pattern rewrites the vendor runs, and the ONNX lowering of the
fused operators they produce (see docs/dicp.md "Fused patterns").

- ``dicp.rms_norm`` -> ``RMSNormalization`` (opset >= 23), else ``Mul, ReduceMean, Add, Sqrt, Reciprocal, Mul,
  Mul``; the ``eps_tensor`` overload (an ``eps`` known only at run time) always takes the expansion;
- ``dicp.silu_mul`` -> ``Sigmoid, Mul, Mul``;
- ``dicp.rotary`` -> ``RotaryEmbedding`` (opset >= 23, ``x`` of shape ``(B, H, S, D)``, ``cos``/``sin`` of shape
  ``(1 or B, 1, S, D/2)``: squeezed and expanded to ``(B, S, D/2)``), else ``Split, Mul, Sub, Add, Concat``;
- ``dicp.attention`` -> ``Attention`` (opset >= 23; grouped-query heads and the causal mask native), else
  ``MatMul, Mul, [mask], Softmax, MatMul`` with key/value heads repeated for grouped-query attention.

Both lowerings compute in float32 inside the graph (float16 values are float32 there, see ``codegen``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dicp.dynamo_bridge import fusion
from dicp.dynamo_bridge.vendor import GraphPass

from .codegen import ConversionContext, compute_dtype, onnx_dtype
from .convert_common import out_dtype, register

__all__ = ["FUSED_OPSET", "rewrite_passes"]

#: The first opset with ``RMSNormalization`` and ``Attention``.
FUSED_OPSET = 23

dicp_ops = torch.ops.dicp


def rewrite_passes() -> list[GraphPass]:
    """The pattern-rewriting passes of the onnxgraph vendor, in order: dicp's fused patterns, then
    ``fold_matmul_views`` (ONNX ``MatMul`` takes batch dimensions)."""
    return [*fusion.ALL_PASSES, fusion.fold_matmul_views]


def _scalar(ctx: ConversionContext, value: Any, dtype: torch.dtype) -> str:
    return ctx.cast(value, dtype) if isinstance(value, str) else ctx.const(float(value), dtype)


@register([dicp_ops.rms_norm.default, dicp_ops.rms_norm.eps_tensor])
def rms_norm(ctx: ConversionContext, x: str, weight: str, eps: Any) -> str:
    dtype = out_dtype(ctx)
    h = ctx.cast(x, torch.float32)
    if ctx.opset >= FUSED_OPSET and not isinstance(eps, str):
        out = ctx.emit("RMSNormalization", [h, ctx.cast(weight, torch.float32)], axis=-1, epsilon=float(eps),
                       stash_type=1, dtype=torch.float32)
        return ctx.cast(out, dtype)
    mean = ctx.emit("ReduceMean", [ctx.emit("Mul", [h, h]), ctx.const([-1], torch.int64)], keepdims=1)
    rms = ctx.emit("Sqrt", [ctx.emit("Add", [mean, _scalar(ctx, eps, torch.float32)])])
    normed = ctx.emit("Mul", [h, ctx.emit("Reciprocal", [rms])], dtype=torch.float32)
    return ctx.emit("Mul", [ctx.cast(weight, dtype), ctx.cast(normed, dtype)], dtype=dtype)


@register(dicp_ops.silu_mul.default)
def silu_mul(ctx: ConversionContext, a: str, b: str) -> str:
    dtype = out_dtype(ctx)
    a = ctx.cast(a, dtype)
    return ctx.emit("Mul", [ctx.emit("Mul", [a, ctx.emit("Sigmoid", [a])]), ctx.cast(b, dtype)], dtype=dtype)


def _same(a: object, b: object) -> bool:
    return statically_known_true(a == b)


def _rotary_native(node: torch.fx.Node) -> bool:
    """Whether ``RotaryEmbedding`` takes the node's operands: a 4-D ``x`` and 4-D ``cos``/``sin`` of one head
    broadcast over ``x``'s heads and batch, with ``x``'s sequence length (decided without a guard)."""
    x, cos, sin = (a.meta.get("val") for a in node.args[:3])
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (x, cos, sin)):
        return False
    return all(_same(t.shape[1], 1) and _same(t.shape[2], x.shape[2])
               and (_same(t.shape[0], 1) or _same(t.shape[0], x.shape[0])) for t in (cos, sin))


@register(dicp_ops.rotary.default)
def rotary(ctx: ConversionContext, x: str, cos: str, sin: str) -> str:
    dtype = out_dtype(ctx)
    x, cos, sin = (ctx.cast(t, dtype) for t in (x, cos, sin))
    if ctx.opset >= FUSED_OPSET and _rotary_native(ctx.node):
        batch = ctx.emit("Concat", [ctx.shape_of(x, start=0, end=1), ctx.const([1, 1], torch.int64)], axis=0,
                         dtype=torch.int64)
        axis = ctx.const([1], torch.int64)
        cos, sin = (ctx.emit("Expand", [ctx.emit("Squeeze", [t, axis], dtype=dtype), batch], dtype=dtype)
                    for t in (cos, sin))
        return ctx.emit("RotaryEmbedding", [x, cos, sin], dtype=dtype)
    x1, x2 = ctx.emit("Split", [x], outputs=2, axis=-1, num_outputs=2, dtype=dtype)
    first = ctx.emit("Sub", [ctx.emit("Mul", [x1, cos], dtype=dtype), ctx.emit("Mul", [x2, sin], dtype=dtype)],
                     dtype=dtype)
    second = ctx.emit("Add", [ctx.emit("Mul", [x2, cos], dtype=dtype), ctx.emit("Mul", [x1, sin], dtype=dtype)],
                      dtype=dtype)
    return ctx.emit("Concat", [first, second], axis=-1, dtype=dtype)


def _static_heads(node: torch.fx.Node) -> str | None:
    """The expansion repeats key/value heads: their counts must be static (they always are in practice)."""
    q, k = (a.meta.get("val") for a in node.args[:2])
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
        return "query/key without metadata"
    if type(q.shape[1]) is not int or type(k.shape[1]) is not int:
        return "symbolic head counts"
    return None


@register(dicp_ops.attention.default, supports=_static_heads)
def attention(ctx: ConversionContext, q: str, k: str, v: str, mask: str | None, scale: float | None,
              is_causal: bool) -> str:
    dtype = out_dtype(ctx)
    q, k, v = (ctx.cast(t, dtype) for t in (q, k, v))
    if mask is not None and ctx.torch_dtype_of(mask) != torch.bool:
        mask = ctx.cast(mask, dtype)
    if ctx.opset >= FUSED_OPSET:
        return ctx.emit("Attention", [q, k, v, mask], scale=None if scale is None else float(scale),
                        is_causal=int(bool(is_causal)), dtype=dtype)
    q_val, k_val, v_val = (a.meta["val"] for a in ctx.node.args[:3])
    heads_q, heads_kv = q_val.shape[1], k_val.shape[1]
    if heads_q != heads_kv:  # grouped-query attention: each key/value head serves heads_q // heads_kv queries
        repeat = ctx.const([1, 1, heads_q // heads_kv, 1, 1], torch.int64)
        sizes = ctx.const([0, heads_q, -1, k_val.shape[-1]], torch.int64)
        axis = ctx.const([2], torch.int64)
        k = ctx.emit("Reshape", [ctx.emit("Expand", [ctx.emit("Unsqueeze", [k, axis]), repeat]), sizes])
        sizes_v = ctx.const([0, heads_q, -1, v_val.shape[-1]], torch.int64)
        v = ctx.emit("Reshape", [ctx.emit("Expand", [ctx.emit("Unsqueeze", [v, axis]), repeat]), sizes_v])
    if scale is None:  # 1/sqrt(dim), the dimension read at run time
        dim = ctx.emit("Cast", [ctx.shape_of(q, start=3)], to=onnx_dtype(compute_dtype(dtype)))
        factor = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [dim])])
    else:
        factor = ctx.const(float(scale), dtype)
    scores = ctx.emit("Mul", [ctx.emit("MatMul", [q, ctx.emit("Transpose", [k], perm=[0, 1, 3, 2])]), factor])
    minus_inf = ctx.const(float("-inf"), dtype)
    if is_causal:  # top-left aligned, as torch: key j is visible to query i when j <= i
        zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
        rows = ctx.emit("Range", [zero, ctx.emit("Squeeze", [ctx.shape_of(q, start=2, end=3)]), one])
        cols = ctx.emit("Range", [zero, ctx.emit("Squeeze", [ctx.shape_of(k, start=2, end=3)]), one])
        visible = ctx.emit("LessOrEqual", [cols, ctx.emit("Unsqueeze", [rows, ctx.const([1], torch.int64)])])
        scores = ctx.emit("Where", [visible, scores, minus_inf])
    if mask is not None:
        scores = (ctx.emit("Where", [mask, scores, minus_inf]) if ctx.torch_dtype_of(mask) == torch.bool
                  else ctx.emit("Add", [scores, mask]))
    probs = ctx.emit("Softmax", [scores], axis=-1)
    return ctx.emit("MatMul", [probs, v], dtype=dtype)
