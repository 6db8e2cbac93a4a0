"""onnxgraph converters of complex values (contract: conversion.py).

ONNX has no complex element type: a complex64 (complex128) value of logical shape ``S`` is a float32 (float64)
value of shape ``S + [2]`` holding (real, imag) pairs; graph inputs and outputs are declared so and the runner
views complex tensors as such pairs at the boundary (codegen.py, runtime.py). ``ctx.val_of``/``ctx.rank_of``
of a complex value give its logical fake value and rank, ``ctx.dtype_of`` the float dtype of its parts: here a
dim ``d < 0`` means ``d + logical rank`` and view sizes get the trailing 2 appended.

Each converter is registered with :func:`~dicp.vendor.onnxgraph.convert_common.register_complex`: it gets only
the nodes that read or make a complex tensor, the operator's float/int converter keeps the others. A complex node
of any operator not registered here stays eager (``dtype complex64 not supported by onnxgraph``).
"""

from __future__ import annotations

from typing import Any

import torch

from . import convert_math, convert_shape  # noqa: F401  (their converters are registered first: wrapped here)
from .codegen import COMPLEX_PARTS, ConversionContext
from .convert_common import aten, is_complex_node, norm_dim, out_dtype, prims, register_complex
from .convert_shape import _slice

__all__: list[str] = []


# -- helpers ---------------------------------------------------------------------------------------------------------


def _part(ctx: ConversionContext) -> torch.dtype:
    """The float dtype of the (real, imag) pairs of the node's (complex) result."""
    return COMPLEX_PARTS[out_dtype(ctx)]


def _is_complex(ctx: ConversionContext, x: Any) -> bool:
    """Whether ``x`` (a value name or a Python scalar) is complex."""
    if isinstance(x, str):
        val = ctx.val_of(x)
        return isinstance(val, torch.Tensor) and val.is_complex()
    return isinstance(x, complex)


def _pairs(ctx: ConversionContext, x: Any, part: torch.dtype) -> str:
    """``x`` (a complex or real value name, or a Python number) as (real, imag) pairs of ``part``."""
    if not isinstance(x, str):
        z = complex(x)
        return ctx.const([z.real, z.imag], part)
    if _is_complex(ctx, x):
        return ctx.cast(x, part)
    column = ctx.emit("Unsqueeze", [ctx.cast(x, part), ctx.const([-1], torch.int64)], dtype=part)
    return ctx.emit("Pad", [column, ctx.const([0, 1], torch.int64), ctx.const(0.0, part),
                            ctx.const([-1], torch.int64)], mode="constant", dtype=part)


def _real_factor(ctx: ConversionContext, x: Any, part: torch.dtype) -> str:
    """A real value name or Python number ``x`` shaped to scale (real, imag) pairs (a trailing 1)."""
    if not isinstance(x, str):
        return ctx.const(x, part)
    return ctx.emit("Unsqueeze", [ctx.cast(x, part), ctx.const([-1], torch.int64)], dtype=part)


def _split(ctx: ConversionContext, pairs: str, part: torch.dtype) -> list[str]:
    """The real and imaginary parts of ``pairs`` (each keeps the trailing dimension, of size 1)."""
    return ctx.emit("Split", [pairs], outputs=2, axis=-1, num_outputs=2, dtype=part)


def _identity(ctx: ConversionContext, x: str) -> str:
    return ctx.emit("Identity", [x], dtype=ctx.dtype_of(x))


# -- complex <-> real views ------------------------------------------------------------------------------------------


@register_complex([aten.view_as_complex.default, aten.view_as_real.default])
def view_as(ctx: ConversionContext, x: str) -> str:
    """The pairs are the layout of both views: ``x`` as it is, under the other fake value."""
    return _identity(ctx, x)


@register_complex(aten.polar.default)
def polar(ctx: ConversionContext, magnitude: str, angle: str) -> str:
    part = _part(ctx)
    r, theta = ctx.cast(magnitude, part), ctx.cast(angle, part)
    last = ctx.const([-1], torch.int64)
    parts = [ctx.emit("Unsqueeze", [ctx.emit("Mul", [r, ctx.emit(op, [theta], dtype=part)], dtype=part), last],
                      dtype=part) for op in ("Cos", "Sin")]
    return ctx.emit("Concat", parts, axis=-1, dtype=part)


# -- arithmetic ------------------------------------------------------------------------------------------------------


@register_complex([aten.mul.Tensor, aten.mul.Scalar])
def mul(ctx: ConversionContext, a: Any, b: Any) -> str:
    part = _part(ctx)
    if not _is_complex(ctx, a):
        a, b = b, a
    if not _is_complex(ctx, b):  # complex x real: both parts scaled
        return ctx.emit("Mul", [_pairs(ctx, a, part), _real_factor(ctx, b, part)], dtype=part)
    ar, ai = _split(ctx, _pairs(ctx, a, part), part)
    br, bi = _split(ctx, _pairs(ctx, b, part), part)
    real = ctx.emit("Sub", [ctx.emit("Mul", [ar, br]), ctx.emit("Mul", [ai, bi])], dtype=part)
    imag = ctx.emit("Add", [ctx.emit("Mul", [ar, bi]), ctx.emit("Mul", [ai, br])], dtype=part)
    return ctx.emit("Concat", [real, imag], axis=-1, dtype=part)


def _real_alpha(node: torch.fx.Node) -> str | None:
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else None)
    return "a complex alpha" if isinstance(alpha, complex) else None


@register_complex([aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar], supports=_real_alpha)
def add(ctx: ConversionContext, a: Any, b: Any, alpha: Any = None) -> str:
    part = _part(ctx)
    b = _pairs(ctx, b, part)
    if alpha is not None and (isinstance(alpha, str) or alpha != 1):
        b = ctx.emit("Mul", [b, ctx.scalar(alpha, part)], dtype=part)
    op = "Sub" if ctx.node.target in (aten.sub.Tensor, aten.sub.Scalar) else "Add"
    return ctx.emit(op, [_pairs(ctx, a, part), b], dtype=part)


@register_complex(aten.neg.default)
def neg(ctx: ConversionContext, x: str) -> str:
    return ctx.emit("Neg", [x], dtype=ctx.dtype_of(x))


@register_complex([aten._conj.default, aten.conj.default, aten.conj_physical.default, aten._conj_physical.default])
def conj(ctx: ConversionContext, x: str) -> str:
    """The conjugate (the imaginary part negated); the conjugate of a real tensor is itself."""
    if not is_complex_node(ctx.node):
        return _identity(ctx, x)
    part = ctx.dtype_of(x)
    return ctx.emit("Mul", [x, ctx.const([1.0, -1.0], part)], dtype=part)


@register_complex([aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default,
                   aten.contiguous.default, aten.resolve_conj.default, aten.resolve_neg.default])
def identity(ctx: ConversionContext, x: str, **_: Any) -> str:
    """Values inside the graph have no conjugate or negative bit: resolving one is the value itself."""
    return _identity(ctx, x)


def _complex_copy(node: torch.fx.Node) -> str | None:
    src, out = node.args[0].meta.get("val"), node.meta.get("val")
    if isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor):
        if src.device != out.device:
            return f"device change {src.device} -> {out.device} stays eager"
        if src.is_complex() and not out.is_complex():
            return "a complex to real cast (it drops the imaginary part)"
    return None


@register_complex([aten._to_copy.default, prims.convert_element_type.default], supports=_complex_copy)
def to_copy(ctx: ConversionContext, x: str, dtype: Any = None, **_: Any) -> str:
    return _pairs(ctx, x, _part(ctx))


@register_complex([aten.sum.default, aten.sum.dim_IntList])
def sum_(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False, **_: Any) -> str:
    part = _part(ctx)
    x = ctx.cast(x, part)
    rank = ctx.rank_of(x)
    axes = list(range(rank)) if not dim else sorted({norm_dim(d, rank) for d in dim})
    if not axes:
        return _identity(ctx, x)
    return ctx.emit("ReduceSum", [x, ctx.const(axes, torch.int64)], keepdims=int(bool(keepdim)), dtype=part)


# -- views and shapes (a dim is one of the logical ones; the trailing pair dimension stays last) ---------------------


@register_complex([aten.view.default, aten._unsafe_view.default, aten.reshape.default])
def view(ctx: ConversionContext, x: str, size: list[Any]) -> str:
    return ctx.emit("Reshape", [x, ctx.sizes([*size, 2])], allowzero=1, dtype=ctx.dtype_of(x))


@register_complex(aten.expand.default)
def expand(ctx: ConversionContext, x: str, size: list[Any], implicit: bool = False) -> str:
    sizes = [1 if isinstance(s, int) and s == -1 else s for s in size]
    return ctx.emit("Expand", [x, ctx.sizes([*sizes, 2])], dtype=ctx.dtype_of(x))


@register_complex(aten.permute.default)
def permute(ctx: ConversionContext, x: str, dims: list[int]) -> str:
    rank = ctx.rank_of(x)
    return ctx.emit("Transpose", [x], perm=[*(norm_dim(d, rank) for d in dims), rank], dtype=ctx.dtype_of(x))


@register_complex([aten.transpose.int, aten.t.default])
def transpose(ctx: ConversionContext, x: str, dim0: int = 0, dim1: int = 1) -> str:
    rank = ctx.rank_of(x)
    if rank < 2:
        return _identity(ctx, x)
    perm = list(range(rank + 1))
    a, b = norm_dim(dim0, rank), norm_dim(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit("Transpose", [x], perm=perm, dtype=ctx.dtype_of(x))


@register_complex(aten.unsqueeze.default)
def unsqueeze(ctx: ConversionContext, x: str, dim: int) -> str:
    axis = norm_dim(dim, ctx.rank_of(x) + 1)
    return ctx.emit("Unsqueeze", [x, ctx.const([axis], torch.int64)], dtype=ctx.dtype_of(x))


@register_complex([aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims])
def squeeze(ctx: ConversionContext, x: str, dim: Any = None) -> str:
    rank = ctx.rank_of(x)
    shape = ctx.val_of(x).shape
    dims = range(rank) if dim is None else [dim] if isinstance(dim, int) else dim
    axes = sorted({a for a in (norm_dim(d, rank) for d in dims) if rank and type(shape[a]) is int and shape[a] == 1})
    if not axes:
        return _identity(ctx, x)
    return ctx.emit("Squeeze", [x, ctx.const(axes, torch.int64)], dtype=ctx.dtype_of(x))


@register_complex(aten.slice.Tensor)
def slice_(ctx: ConversionContext, x: str, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> str:
    # a non-negative axis below the logical rank is the same physical axis
    return _slice(ctx, x, norm_dim(dim, ctx.rank_of(x)), start, end, step)


@register_complex(aten.select.int)
def select(ctx: ConversionContext, x: str, dim: int, index: Any) -> str:
    axis = norm_dim(dim, ctx.rank_of(x))
    return ctx.emit("Gather", [x, ctx.scalar(index, torch.int64)], axis=axis, dtype=ctx.dtype_of(x))


@register_complex(aten.cat.default)
def cat(ctx: ConversionContext, tensors: list[str], dim: int = 0) -> str:
    part = _part(ctx)
    axis = norm_dim(dim, ctx.out.dim())
    # torch skips 1-D empty tensors of any size elsewhere (the legacy form of an empty KV cache)
    kept = [t for t in tensors if not (ctx.rank_of(t) == 1 and ctx.static_shape(t) == [0])] or tensors
    return ctx.emit("Concat", [_pairs(ctx, t, part) for t in kept], axis=axis, dtype=part)


@register_complex(aten.stack.default)
def stack(ctx: ConversionContext, tensors: list[str], dim: int = 0) -> str:
    part = _part(ctx)
    axis = norm_dim(dim, ctx.out.dim())
    axes = ctx.const([axis], torch.int64)
    return ctx.emit("Concat", [ctx.emit("Unsqueeze", [_pairs(ctx, t, part), axes]) for t in tensors], axis=axis,
                    dtype=part)
