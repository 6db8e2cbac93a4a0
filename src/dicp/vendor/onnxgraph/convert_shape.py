"""onnxgraph converters: views, concatenation, splitting, indexing, scatter (contract: conversion.py)."""

from __future__ import annotations

import operator
from typing import Any

import torch

from .codegen import ConversionContext
from .convert_common import INT64_MAX, INT64_MIN, aten, conversions, norm_dim, operand, out_dtype, register


@conversions.register(operator.getitem)
def getitem(ctx: ConversionContext, xs: Any, index: int) -> Any:
    return xs[index]


@register([aten.view.default, aten._unsafe_view.default, aten.reshape.default])
def view(ctx: ConversionContext, x: str, size: list[Any]) -> str:
    return ctx.emit("Reshape", [x, ctx.sizes(list(size))], allowzero=1, dtype=ctx.dtype_of(x))


@register(aten.expand.default)
def expand(ctx: ConversionContext, x: str, size: list[Any], implicit: bool = False) -> str:
    # -1 keeps the input's size; ONNX Expand broadcasts both ways, so 1 does the same
    sizes = [1 if isinstance(s, int) and s == -1 else s for s in size]
    return ctx.emit("Expand", [x, ctx.sizes(sizes)], dtype=ctx.dtype_of(x))


@register(aten.permute.default)
def permute(ctx: ConversionContext, x: str, dims: list[int]) -> str:
    rank = ctx.rank_of(x)
    return ctx.emit("Transpose", [x], perm=[norm_dim(d, rank) for d in dims], dtype=ctx.dtype_of(x))


@register([aten.transpose.int, aten.t.default])
def transpose(ctx: ConversionContext, x: str, dim0: int = 0, dim1: int = 1) -> str:
    rank = ctx.rank_of(x)
    if rank < 2:
        return ctx.emit("Identity", [x], dtype=ctx.dtype_of(x))
    perm = list(range(rank))
    a, b = norm_dim(dim0, rank), norm_dim(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit("Transpose", [x], perm=perm, dtype=ctx.dtype_of(x))


@register([aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims])
def squeeze(ctx: ConversionContext, x: str, dim: Any = None) -> str:
    rank = ctx.rank_of(x)
    shape = ctx.val_of(x).shape
    dims = range(rank) if dim is None else [dim] if isinstance(dim, int) else dim
    # a symbolic size is never 1 (torch specializes sizes 0 and 1), so only static 1s are squeezed
    axes = sorted({norm_dim(d, rank) for d in dims if rank and type(shape[norm_dim(d, rank)]) is int
                   and shape[norm_dim(d, rank)] == 1})
    if not axes:
        return ctx.emit("Identity", [x], dtype=ctx.dtype_of(x))
    return ctx.emit("Squeeze", [x, ctx.const(axes, torch.int64)], dtype=ctx.dtype_of(x))


@register(aten.unsqueeze.default)
def unsqueeze(ctx: ConversionContext, x: str, dim: int) -> str:
    axis = norm_dim(dim, ctx.rank_of(x) + 1)
    return ctx.emit("Unsqueeze", [x, ctx.const([axis], torch.int64)], dtype=ctx.dtype_of(x))


def _slice(ctx: ConversionContext, x: str, dim: int, start: Any, end: Any, step: Any = 1) -> str:
    axis = norm_dim(dim, ctx.rank_of(x))
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    inputs = [x, ctx.sizes([start]), ctx.sizes([end]), ctx.const([axis], torch.int64), ctx.sizes([step])]
    return ctx.emit("Slice", inputs, dtype=ctx.dtype_of(x))


@register(aten.slice.Tensor)
def slice_(ctx: ConversionContext, x: str, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> str:
    return _slice(ctx, x, dim, start, end, step)


@register(aten.narrow.default)
def narrow(ctx: ConversionContext, x: str, dim: int, start: Any, length: Any) -> str:
    end = start + length if isinstance(start, int) and isinstance(length, int) else ctx.emit(
        "Add", [ctx.scalar(start, torch.int64), ctx.scalar(length, torch.int64)], dtype=torch.int64)
    return _slice(ctx, x, dim, start, end)


@register(aten.select.int)
def select(ctx: ConversionContext, x: str, dim: int, index: Any) -> str:
    axis = norm_dim(dim, ctx.rank_of(x))
    return ctx.emit("Gather", [x, ctx.scalar(index, torch.int64)], axis=axis, dtype=ctx.dtype_of(x))


def _plain_step(node: torch.fx.Node) -> str | None:
    start = node.args[3] if len(node.args) > 3 else node.kwargs.get("start")
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if not isinstance(step, int) or step < 1:
        return "slice_scatter with a symbolic step"
    return None if step == 1 or start is None or (isinstance(start, int) and start >= 0) else \
        "slice_scatter with a step and a negative or symbolic start"


@register(aten.slice_scatter.default, supports=_plain_step)
def slice_scatter(ctx: ConversionContext, x: str, src: str, dim: int = 0, start: Any = None, end: Any = None,
                  step: Any = 1) -> str:
    dtype = out_dtype(ctx)
    axis = norm_dim(dim, ctx.rank_of(x))
    start = 0 if start is None else start
    if step != 1:  # src fills positions start, start + step, ...: scattered along the axis
        count = ctx.emit("Squeeze", [ctx.shape_of(src, start=axis, end=axis + 1)], dtype=torch.int64)
        stop = ctx.emit("Add", [ctx.const(start, torch.int64), ctx.emit("Mul", [count, ctx.const(step, torch.int64)])])
        positions = ctx.emit("Range", [ctx.const(start, torch.int64), stop, ctx.const(step, torch.int64)])
        column = [1] * ctx.rank_of(src)
        column[axis] = -1
        where = ctx.emit("Expand", [ctx.emit("Reshape", [positions, ctx.const(column, torch.int64)]),
                                    ctx.shape_of(src)])
        return ctx.emit("ScatterElements", [x, where, ctx.cast(src, dtype)], axis=axis, dtype=dtype)
    end = INT64_MAX if end is None else end
    parts = [_slice(ctx, x, axis, 0, start), ctx.cast(src, dtype), _slice(ctx, x, axis, end, INT64_MAX)]
    return ctx.emit("Concat", parts, axis=axis, dtype=dtype)


@register(aten.select_scatter.default)
def select_scatter(ctx: ConversionContext, x: str, src: str, dim: int, index: Any) -> str:
    axis = norm_dim(dim, ctx.rank_of(x))
    src = ctx.emit("Unsqueeze", [src, ctx.const([axis], torch.int64)], dtype=ctx.dtype_of(src))
    if isinstance(index, int):
        end: Any = index + 1 if index != -1 else INT64_MAX
    else:
        end = ctx.emit("Add", [ctx.scalar(index, torch.int64), ctx.const(1, torch.int64)], dtype=torch.int64)
    return slice_scatter(ctx, x, src, axis, index, end)


@register(aten.cat.default)
def cat(ctx: ConversionContext, tensors: list[str], dim: int = 0) -> str:
    dtype = out_dtype(ctx)
    axis = norm_dim(dim, ctx.out.dim())
    # torch skips 1-D empty tensors of any size elsewhere (the legacy form of an empty KV cache)
    kept = [t for t in tensors if not (ctx.rank_of(t) == 1 and ctx.static_shape(t) == [0])] or tensors
    return ctx.emit("Concat", [ctx.cast(t, dtype) for t in kept], axis=axis, dtype=dtype)


@register(aten.stack.default)
def stack(ctx: ConversionContext, tensors: list[str], dim: int = 0) -> str:
    dtype = out_dtype(ctx)
    axis = norm_dim(dim, ctx.out.dim())
    parts = [ctx.emit("Unsqueeze", [ctx.cast(t, dtype), ctx.const([axis], torch.int64)]) for t in tensors]
    return ctx.emit("Concat", parts, axis=axis, dtype=dtype)


@register(aten.split.Tensor)
def split(ctx: ConversionContext, x: str, split_size: Any, dim: int = 0) -> list[str]:
    count = len(ctx.out)
    outs = []
    for i in range(count):
        if isinstance(split_size, int):
            start: Any = i * split_size
            end: Any = (i + 1) * split_size if i < count - 1 else INT64_MAX
        else:
            start = ctx.emit("Mul", [ctx.scalar(split_size, torch.int64), ctx.const(i, torch.int64)])
            end = ctx.emit("Mul", [ctx.scalar(split_size, torch.int64), ctx.const(i + 1, torch.int64)]) \
                if i < count - 1 else INT64_MAX
        outs.append(_slice(ctx, x, dim, start, end))
    return outs


@register(aten.split_with_sizes.default)
def split_with_sizes(ctx: ConversionContext, x: str, split_sizes: list[Any], dim: int = 0) -> list[str]:
    axis = norm_dim(dim, ctx.rank_of(x))
    if len(split_sizes) == 1:
        return [ctx.emit("Identity", [x], dtype=ctx.dtype_of(x))]
    return ctx.emit("Split", [x, ctx.sizes(list(split_sizes))], outputs=len(split_sizes), axis=axis,
                    dtype=ctx.dtype_of(x))


@register(aten.unbind.int)
def unbind(ctx: ConversionContext, x: str, dim: int = 0) -> list[str]:
    axis = norm_dim(dim, ctx.rank_of(x))
    count = len(ctx.out)
    axes = ctx.const([axis], torch.int64)
    if count == 1:
        return [ctx.emit("Squeeze", [x, axes], dtype=ctx.dtype_of(x))]
    parts = ctx.emit("Split", [x], outputs=count, axis=axis, num_outputs=count)
    return [ctx.emit("Squeeze", [p, axes], dtype=ctx.dtype_of(x)) for p in parts]


@register(aten.index_select.default)
def index_select(ctx: ConversionContext, x: str, dim: int, index: str) -> str:
    axis = norm_dim(dim, ctx.rank_of(x))
    return ctx.emit("Gather", [x, ctx.cast(index, torch.int64)], axis=axis, dtype=ctx.dtype_of(x))


@register(aten.gather.default)
def gather(ctx: ConversionContext, x: str, dim: int, index: str, sparse_grad: bool = False) -> str:
    axis = norm_dim(dim, ctx.rank_of(x))
    return ctx.emit("GatherElements", [x, index], axis=axis, dtype=ctx.dtype_of(x))


@register([aten.scatter.src, aten.scatter.value, aten.scatter_add.default])
def scatter(ctx: ConversionContext, x: str, dim: int, index: str, src: Any) -> str:
    dtype = out_dtype(ctx)
    axis = norm_dim(dim, ctx.rank_of(x))
    if isinstance(src, str):
        src = ctx.cast(src, dtype)
        if ctx.static_shape(src) != ctx.static_shape(index) or ctx.static_shape(src) is None:
            src = ctx.emit("Slice", [src, ctx.const([0] * ctx.rank_of(index), torch.int64), ctx.shape_of(index)])
    else:
        src = ctx.emit("Expand", [ctx.const(src, dtype), ctx.shape_of(index)])
    reduction = "add" if ctx.node.target is aten.scatter_add.default else "none"
    return ctx.emit("ScatterElements", [x, index, src], axis=axis, reduction=reduction, dtype=dtype)


def _single_index(node: torch.fx.Node) -> str | None:
    indices = node.args[1]
    present = [i for i, t in enumerate(indices) if t is not None]
    if len(present) != 1:
        return "index with several index tensors"
    val = indices[present[0]].meta.get("val")
    if val is None or val.dtype in (torch.bool, torch.uint8):
        return "index with a boolean mask"
    return None


def _leading_indices(node: torch.fx.Node) -> str | None:
    present = [i for i, t in enumerate(node.args[1]) if t is not None]
    if len(present) == 1:
        return _single_index(node)
    if present != list(range(len(present))):
        return "index with several index tensors not on the leading dimensions"
    if any(node.args[1][i].meta["val"].dtype in (torch.bool, torch.uint8) for i in present):
        return "index with a boolean mask"
    return None


@register(aten.index.Tensor, supports=_leading_indices)
def index(ctx: ConversionContext, x: str, indices: list[str | None]) -> str:
    """``x[idx]`` (Gather along its axis) or ``x[i0, i1, ...]`` on the leading dimensions (GatherND on the index
    tensors broadcast together and stacked)."""
    present = [i for i, t in enumerate(indices) if t is not None]
    if len(present) == 1:
        axis = present[0]
        return ctx.emit("Gather", [x, ctx.cast(indices[axis], torch.int64)], axis=axis, dtype=ctx.dtype_of(x))
    tensors = [ctx.cast(indices[i], torch.int64) for i in present]
    common = tensors[0]
    for t in tensors[1:]:
        common = ctx.emit("Add", [common, t])
    last = ctx.const([-1], torch.int64)
    stacked = ctx.emit("Concat", [ctx.emit("Unsqueeze", [ctx.emit("Expand", [t, ctx.shape_of(common)]), last])
                                  for t in tensors], axis=-1)
    return ctx.emit("GatherND", [x, stacked], dtype=ctx.dtype_of(x))


def _index_put_one_axis(node: torch.fx.Node) -> str | None:
    reason = _single_index(node)
    if reason:
        return reason
    axis = next(i for i, t in enumerate(node.args[1]) if t is not None)
    if axis and node.args[1][axis].meta["val"].dim() != 1:
        return "index_put with a multi-dimensional index on a dimension other than the first"
    return None


@register(aten.index_put.default, supports=_index_put_one_axis)
def index_put(ctx: ConversionContext, x: str, indices: list[str | None], values: str, accumulate: bool = False
              ) -> str:
    """``x[..., idx, ...] = values`` (or ``+=``): ScatterND over the first dimension, with the indexed dimension
    moved first (and back) when it is another one."""
    dtype = out_dtype(ctx)
    axis = next(i for i, t in enumerate(indices) if t is not None)
    idx = ctx.cast(indices[axis], torch.int64)
    idx_nd = ctx.emit("Unsqueeze", [idx, ctx.const([-1], torch.int64)])
    pieces = [ctx.shape_of(x, end=axis)] if axis else []
    update_shape = ctx.emit("Concat", [*pieces, ctx.shape_of(idx), ctx.shape_of(x, start=axis + 1)], axis=0)
    updates = ctx.emit("Expand", [ctx.cast(values, dtype), update_shape])
    reduction = "add" if accumulate else "none"
    if not axis:
        return ctx.emit("ScatterND", [x, idx_nd, updates], reduction=reduction, dtype=dtype)
    rank = ctx.rank_of(x)
    perm = [axis, *(d for d in range(rank) if d != axis)]
    back = [perm.index(d) for d in range(rank)]
    moved = [ctx.emit("Transpose", [v], perm=perm) for v in (x, updates)]
    scattered = ctx.emit("ScatterND", [*moved[:1], idx_nd, moved[1]], reduction=reduction)
    return ctx.emit("Transpose", [scattered], perm=back, dtype=dtype)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(ctx: ConversionContext, x: str, pad: list[Any], value: Any = 0) -> str:
    dtype = out_dtype(ctx)
    rank = ctx.rank_of(x)
    pairs = len(pad) // 2
    axes = [rank - 1 - i for i in range(pairs)]
    begins, ends = [pad[2 * i] for i in range(pairs)], [pad[2 * i + 1] for i in range(pairs)]
    inputs = [x, ctx.sizes(begins + ends), operand(ctx, value, dtype), ctx.const(axes, torch.int64)]
    return ctx.emit("Pad", inputs, mode="constant", dtype=dtype)


@register(aten.flip.default)
def flip(ctx: ConversionContext, x: str, dims: list[int]) -> str:
    rank = ctx.rank_of(x)
    axes = [norm_dim(d, rank) for d in dims]
    n = len(axes)
    inputs = [x, ctx.const([-1] * n, torch.int64), ctx.const([INT64_MIN] * n, torch.int64),
              ctx.const(axes, torch.int64), ctx.const([-1] * n, torch.int64)]
    return ctx.emit("Slice", inputs, dtype=ctx.dtype_of(x))


@register(aten.repeat.default)
def repeat(ctx: ConversionContext, x: str, repeats: list[Any]) -> str:
    extra = len(repeats) - ctx.rank_of(x)
    if extra:
        x = ctx.emit("Unsqueeze", [x, ctx.const(list(range(extra)), torch.int64)])
    return ctx.emit("Tile", [x, ctx.sizes(list(repeats))], dtype=out_dtype(ctx))


@register(aten.embedding.default)
def embedding(ctx: ConversionContext, weight: str, indices: str, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> str:
    return ctx.emit("Gather", [weight, ctx.cast(indices, torch.int64)], axis=0, dtype=ctx.dtype_of(weight))


def _no_freq_scale(node: torch.fx.Node) -> str | None:
    scale = node.args[4] if len(node.args) > 4 else node.kwargs.get("scale_grad_by_freq", False)
    return "embedding_dense_backward with scale_grad_by_freq" if scale else None


@register(aten.embedding_dense_backward.default, supports=_no_freq_scale)
def embedding_dense_backward(ctx: ConversionContext, grad: str, indices: str, num_weights: Any, padding_idx: int,
                             scale_grad_by_freq: bool) -> str:
    dtype = out_dtype(ctx)
    idx = ctx.cast(indices, torch.int64)
    grad = ctx.cast(grad, dtype)
    if padding_idx >= 0:
        keep = ctx.emit("Not", [ctx.emit("Equal", [idx, ctx.const(padding_idx, torch.int64)])])
        keep = ctx.emit("Unsqueeze", [keep, ctx.const([-1], torch.int64)])
        grad = ctx.emit("Where", [keep, grad, ctx.const(0.0, dtype)])
    width = ctx.shape_of(grad, start=-1)
    zeros = ctx.emit("Expand", [ctx.const(0.0, dtype), ctx.emit("Concat", [ctx.sizes([num_weights]), width],
                                                                 axis=0)])
    idx_nd = ctx.emit("Unsqueeze", [idx, ctx.const([-1], torch.int64)])
    return ctx.emit("ScatterND", [zeros, idx_nd, grad], reduction="add", dtype=dtype)


__all__: list[str] = []
