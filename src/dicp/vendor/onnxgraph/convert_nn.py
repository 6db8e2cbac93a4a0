"""onnxgraph converters: matmul, softmax, normalization, losses, convolution, pooling (contract: conversion.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .codegen import ConversionContext
from .convert_common import INT64_MAX, aten, no_float64, norm_dim, operand, out_dtype, register

# -- matmul ------------------------------------------------------------------------------------------------------


@register([aten.mm.default, aten.bmm.default, aten.matmul.default])
def mm(ctx: ConversionContext, a: str, b: str) -> str:
    return ctx.emit("MatMul", [a, b], dtype=out_dtype(ctx))


@register([aten.addmm.default, aten.baddbmm.default])
def addmm(ctx: ConversionContext, bias: str, a: str, b: str, *, beta: Any = 1, alpha: Any = 1) -> str:
    dtype = out_dtype(ctx)
    product = ctx.emit("MatMul", [a, b])
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        product = ctx.emit("Mul", [product, operand(ctx, alpha, dtype)])
    if isinstance(beta, (int, float)) and beta == 0:
        return ctx.emit("Identity", [product], dtype=dtype)
    if not (isinstance(beta, (int, float)) and beta == 1):
        bias = ctx.emit("Mul", [bias, operand(ctx, beta, dtype)])
    return ctx.emit("Add", [product, bias], dtype=dtype)


# -- softmax -----------------------------------------------------------------------------------------------------


@register([aten._softmax.default, aten._log_softmax.default])
def softmax(ctx: ConversionContext, x: str, dim: int, half_to_float: bool = False) -> str:
    dtype = out_dtype(ctx)
    op = "Softmax" if ctx.node.target is aten._softmax.default else "LogSoftmax"
    return ctx.emit(op, [ctx.cast(x, dtype)], axis=norm_dim(dim, ctx.rank_of(x)), dtype=dtype)


@register(aten._safe_softmax.default)
def safe_softmax(ctx: ConversionContext, x: str, dim: int, dtype: Any = None) -> str:
    """Softmax, with zeros for a row whose every entry is -inf (a fully masked attention row), where softmax
    gives NaN: as PyTorch's ``_safe_softmax``."""
    out = out_dtype(ctx)
    axis = norm_dim(dim, ctx.rank_of(x))
    soft = ctx.emit("Softmax", [ctx.cast(x, out)], axis=axis, dtype=out)
    masked = ctx.cast(ctx.emit("IsInf", [ctx.cast(x, torch.float32)], detect_positive=0, dtype=torch.bool), torch.int32)
    every = ctx.emit("ReduceMin", [masked, ctx.const([axis], torch.int64)], keepdims=1, dtype=torch.int32)
    return ctx.emit("Where", [ctx.cast(every, torch.bool), ctx.const(0, out), soft], dtype=out)


@register(aten._softmax_backward_data.default)
def softmax_backward(ctx: ConversionContext, grad: str, y: str, dim: int, input_dtype: Any) -> str:
    dtype = out_dtype(ctx)
    axes = ctx.const([norm_dim(dim, ctx.rank_of(y))], torch.int64)
    gy = ctx.emit("Mul", [grad, y])
    total = ctx.emit("ReduceSum", [gy, axes], keepdims=1)
    return ctx.cast(ctx.emit("Sub", [gy, ctx.emit("Mul", [y, total])], dtype=ctx.dtype_of(y), like=y), dtype)


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward(ctx: ConversionContext, grad: str, y: str, dim: int, input_dtype: Any) -> str:
    dtype = out_dtype(ctx)
    axes = ctx.const([norm_dim(dim, ctx.rank_of(y))], torch.int64)
    total = ctx.emit("ReduceSum", [grad, axes], keepdims=1)
    result = ctx.emit("Sub", [grad, ctx.emit("Mul", [ctx.emit("Exp", [y]), total])], dtype=ctx.dtype_of(y), like=y)
    return ctx.cast(result, dtype)


# -- normalization -----------------------------------------------------------------------------------------------


@register(aten.native_layer_norm.default)
def native_layer_norm(ctx: ConversionContext, x: str, normalized_shape: list[Any], weight: str | None,
                      bias: str | None, eps: float) -> list[str]:
    dtype = out_dtype(ctx)
    axis = ctx.rank_of(x) - len(normalized_shape)
    norm_shape = ctx.shape_of(x, start=axis)
    if weight is None:
        weight = ctx.emit("Expand", [ctx.const(1.0, dtype), norm_shape])
    if bias is None:  # ORT 1.32 crashes (SIGSEGV) on a LayerNormalization without its optional bias
        bias = ctx.emit("Expand", [ctx.const(0.0, dtype), norm_shape])
    if ctx.dtype_of(x) == torch.float64:  # ORT's LayerNormalization has no double statistics: compose it
        axes = ctx.const(list(range(axis, ctx.rank_of(x))), torch.int64)
        mean = ctx.emit("ReduceMean", [x, axes], keepdims=1)
        diff = ctx.emit("Sub", [x, mean])
        var = ctx.emit("ReduceMean", [ctx.emit("Mul", [diff, diff]), axes], keepdims=1)
        rstd = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.const(float(eps), dtype)])])])
        out = ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Mul", [diff, rstd]), weight]), bias])
    else:
        out, mean, rstd = ctx.emit("LayerNormalization", [x, weight, bias], outputs=3, axis=axis,
                                   epsilon=float(eps))
    # ONNX computes the statistics in float32 (stash_type): cast them to the dtype torch gives them
    stats = ctx.out[1].dtype
    return [ctx.emit("Identity", [out], dtype=dtype, like=x), ctx.cast(mean, stats), ctx.cast(rstd, stats)]


def _channel_axes(rank: int) -> list[int]:
    return [0, *range(2, rank)]


def _channel_shape(ctx: ConversionContext, v: str, rank: int) -> str:
    """A per-channel vector (C,) reshaped to broadcast against (N, C, ...)."""
    return ctx.emit("Reshape", [v, ctx.const([-1] + [1] * (rank - 2), torch.int64)])


def _batch_norm(ctx: ConversionContext, x: str, weight: str | None, bias: str | None, mean: str, invstd: str,
                rank: int, dtype: torch.dtype) -> str:
    y = ctx.emit("Mul", [ctx.emit("Sub", [x, _channel_shape(ctx, mean, rank)]), _channel_shape(ctx, invstd, rank)])
    if weight is not None:
        y = ctx.emit("Mul", [y, _channel_shape(ctx, weight, rank)])
    if bias is not None:
        y = ctx.emit("Add", [y, _channel_shape(ctx, bias, rank)])
    return ctx.emit("Identity", [y], dtype=dtype)


def _batch_stats(ctx: ConversionContext, x: str, rank: int, eps: float) -> tuple[str, str, str, str]:
    """(mean, biased var, invstd, element count per channel as float) over every axis but 1."""
    axes = ctx.const(_channel_axes(rank), torch.int64)
    mean = ctx.emit("ReduceMean", [x, axes], keepdims=0)
    diff = ctx.emit("Sub", [x, _channel_shape(ctx, mean, rank)])
    var = ctx.emit("ReduceMean", [ctx.emit("Mul", [diff, diff]), axes], keepdims=0)
    cd = ctx.dtype_of(x)
    invstd = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.const(float(eps), cd)])])])
    shape = ctx.shape_of(x)
    count = ctx.emit("ReduceProd", [ctx.emit("Gather", [shape, ctx.const(_channel_axes(rank), torch.int64)], axis=0)],
                     keepdims=0)
    return mean, var, invstd, ctx.cast(count, cd)


def _not_mutating(node: torch.fx.Node) -> str | None:
    training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training")
    if training and node.args[3] is not None:
        return "batch norm updating running statistics in place (functionalized graphs use the _functional form)"
    return None


def _empty(ctx: ConversionContext, dtype: torch.dtype) -> str:
    return ctx.const(np.zeros(0), dtype)


@register([aten.native_batch_norm.default, aten._native_batch_norm_legit.default], supports=_not_mutating)
def native_batch_norm(ctx: ConversionContext, x: str, weight: str | None, bias: str | None, running_mean: str | None,
                      running_var: str | None, training: bool, momentum: float, eps: float) -> list[str]:
    dtype = out_dtype(ctx)
    rank = ctx.rank_of(x)
    if training:
        mean, _, invstd, _ = _batch_stats(ctx, x, rank, eps)
        return [_batch_norm(ctx, x, weight, bias, mean, invstd, rank, dtype), mean, invstd]
    invstd = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [ctx.emit("Add", [running_var, ctx.const(float(eps), dtype)])])])
    return [_batch_norm(ctx, x, weight, bias, running_mean, invstd, rank, dtype), _empty(ctx, dtype),
            _empty(ctx, dtype)]


@register(aten._native_batch_norm_legit_no_training.default)
def batch_norm_no_training(ctx: ConversionContext, x: str, weight: str | None, bias: str | None, running_mean: str,
                           running_var: str, momentum: float, eps: float) -> list[str]:
    return native_batch_norm(ctx, x, weight, bias, running_mean, running_var, False, momentum, eps)


@register(aten._native_batch_norm_legit.no_stats)
def batch_norm_no_stats(ctx: ConversionContext, x: str, weight: str | None, bias: str | None, training: bool,
                        momentum: float, eps: float) -> list[str]:
    dtype = out_dtype(ctx)
    rank = ctx.rank_of(x)
    mean, _, invstd, _ = _batch_stats(ctx, x, rank, eps)
    return [_batch_norm(ctx, x, weight, bias, mean, invstd, rank, dtype), mean, invstd]


@register(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(ctx: ConversionContext, x: str, weight: str | None, bias: str | None, running_mean: str,
                          running_var: str, training: bool, momentum: float, eps: float) -> list[str]:
    dtype = out_dtype(ctx)
    rank = ctx.rank_of(x)
    if not training:
        out, save_mean, save_invstd = native_batch_norm(ctx, x, weight, bias, running_mean, running_var, False,
                                                        momentum, eps)
        return [out, save_mean, save_invstd, ctx.emit("Identity", [running_mean]),
                ctx.emit("Identity", [running_var])]
    mean, var, invstd, count = _batch_stats(ctx, x, rank, eps)
    out = _batch_norm(ctx, x, weight, bias, mean, invstd, rank, dtype)
    cd = ctx.dtype_of(x)
    keep, m, one = ctx.const(1.0 - momentum, cd), ctx.const(momentum, cd), ctx.const(1.0, cd)
    unbiased = ctx.emit("Div", [ctx.emit("Mul", [var, count]),
                                ctx.emit("Max", [ctx.emit("Sub", [count, one]), one])])
    new_mean = ctx.emit("Add", [ctx.emit("Mul", [running_mean, keep]), ctx.emit("Mul", [mean, m])])
    new_var = ctx.emit("Add", [ctx.emit("Mul", [running_var, keep]), ctx.emit("Mul", [unbiased, m])])
    return [out, mean, invstd, new_mean, new_var]


# -- losses ------------------------------------------------------------------------------------------------------


def _nll_2d(node: torch.fx.Node) -> str | None:
    val = node.args[0].meta.get("val") if node.target is aten.nll_loss_forward.default else node.args[1].meta.get("val")
    return None if val is not None and val.dim() in (1, 2) else "nll_loss on inputs of rank other than 1 or 2"


def _nll_terms(ctx: ConversionContext, target: str, weight: str | None, ignore_index: int, dtype: torch.dtype
               ) -> tuple[str, str, str]:
    """(safe target index, per-sample weight with ignored samples at 0, the target as a column)."""
    target = ctx.cast(target, torch.int64)
    valid = ctx.emit("Not", [ctx.emit("Equal", [target, ctx.const(ignore_index, torch.int64)])])
    safe = ctx.emit("Where", [valid, target, ctx.const(0, torch.int64)])
    w = ctx.emit("Gather", [weight, safe], axis=0) if weight is not None else ctx.emit(
        "Expand", [ctx.const(1.0, dtype), ctx.shape_of(target)])
    w = ctx.emit("Where", [valid, w, ctx.const(0.0, dtype)])
    return safe, w, ctx.emit("Unsqueeze", [safe, ctx.const([-1], torch.int64)])


@register(aten.nll_loss_forward.default, supports=_nll_2d)
def nll_loss_forward(ctx: ConversionContext, x: str, target: str, weight: str | None, reduction: int,
                     ignore_index: int) -> list[str]:
    dtype = out_dtype(ctx)
    _, w, column = _nll_terms(ctx, target, weight, ignore_index, dtype)
    if ctx.rank_of(x) == 1:
        picked = ctx.emit("Gather", [x, column], axis=0)
        picked = ctx.emit("Reshape", [picked, ctx.const([], torch.int64)])
    else:
        picked = ctx.emit("Squeeze", [ctx.emit("GatherElements", [x, column], axis=1), ctx.const([1], torch.int64)])
    losses = ctx.emit("Neg", [ctx.emit("Mul", [picked, w])])
    total_weight = ctx.emit("ReduceSum", [w], keepdims=0) if ctx.rank_of(target) else ctx.emit("Identity", [w])
    if reduction == 0:
        return [ctx.emit("Identity", [losses], dtype=dtype), total_weight]
    summed = ctx.emit("ReduceSum", [losses], keepdims=0) if ctx.rank_of(target) else losses
    if reduction == 2:
        return [summed, total_weight]
    return [ctx.emit("Div", [summed, total_weight], dtype=dtype), total_weight]


@register(aten.nll_loss_backward.default, supports=_nll_2d)
def nll_loss_backward(ctx: ConversionContext, grad: str, x: str, target: str, weight: str | None, reduction: int,
                      ignore_index: int, total_weight: str) -> str:
    dtype = out_dtype(ctx)
    _, w, column = _nll_terms(ctx, target, weight, ignore_index, dtype)
    grad, total_weight = ctx.cast(grad, dtype), ctx.cast(total_weight, dtype)
    scale = ctx.emit("Div", [grad, total_weight]) if reduction == 1 else grad
    values = ctx.emit("Neg", [ctx.emit("Mul", [w, scale])])
    zeros = ctx.emit("Expand", [ctx.const(0.0, dtype), ctx.shape_of(x)])
    if ctx.rank_of(x) == 1:
        values = ctx.emit("Reshape", [values, ctx.const([1], torch.int64)])
        return ctx.emit("ScatterElements", [zeros, column, values], axis=0, dtype=dtype)
    values = ctx.emit("Unsqueeze", [values, ctx.const([-1], torch.int64)])
    return ctx.emit("ScatterElements", [zeros, column, values], axis=1, dtype=dtype)


# -- convolution -------------------------------------------------------------------------------------------------


def _conv_attrs(stride: list[int], padding: list[int], dilation: list[int], groups: int) -> dict[str, Any]:
    return {"strides": list(stride), "pads": list(padding) * 2, "dilations": list(dilation), "group": groups}


def _static_conv(node: torch.fx.Node) -> str | None:
    for arg in node.args[3:]:
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        if any(isinstance(a, torch.fx.Node) for a in items):
            return "convolution with symbolic stride, padding or dilation"
    return None


@register(aten.convolution.default, supports=lambda n: _static_conv(n) or no_float64("Conv")(n))
def convolution(ctx: ConversionContext, x: str, weight: str, bias: str | None, stride: list[int], padding: list[int],
                dilation: list[int], transposed: bool, output_padding: list[int], groups: int) -> str:
    dtype = out_dtype(ctx)
    attrs = _conv_attrs(stride, padding, dilation, groups)
    if transposed:
        return ctx.emit("ConvTranspose", [x, weight, bias], output_padding=list(output_padding), dtype=dtype,
                        **attrs)
    return ctx.emit("Conv", [x, weight, bias], dtype=dtype, **attrs)


def _conv_backward_forms(node: torch.fx.Node) -> str | None:
    reason = _static_conv(node) or no_float64("Conv")(node)
    if reason:
        return reason
    return "transposed convolution_backward" if node.args[7] else None


@register(aten.convolution_backward.default, supports=_conv_backward_forms)
def convolution_backward(ctx: ConversionContext, grad: str, x: str, weight: str, bias_sizes: Any, stride: list[int],
                         padding: list[int], dilation: list[int], transposed: bool, output_padding: list[int],
                         groups: int, output_mask: list[bool]) -> list[str | None]:
    dtype = out_dtype(ctx) if ctx.out[0] is not None else ctx.dtype_of(grad)
    rank = ctx.rank_of(x)
    spatial = rank - 2
    results: list[str | None] = [None, None, None]
    if output_mask[0]:
        # the input gradient is the transposed convolution, fitted at the end to the input's size
        attrs = _conv_attrs(stride, padding, dilation, groups)
        attrs["pads"] = list(padding) + [0] * spatial  # the end is cut or padded to the input's size below
        gi = ctx.emit("ConvTranspose", [grad, weight], **attrs)
        results[0] = ctx.emit("Identity", [_fit(ctx, gi, x)], dtype=dtype)
    if output_mask[1]:
        # groups fold into channels: input (N, G*Ci, ...) -> (Ci, G*N, ...), grad (N, G*Co, ...) -> (G*Co, N, ...)
        g = groups
        xs = ctx.shape_of(x)
        gs = ctx.shape_of(grad)
        first, second, g1 = (ctx.const([i], torch.int64) for i in (0, 1, g))
        n = ctx.emit("Gather", [xs, first], axis=0)
        ci = ctx.emit("Div", [ctx.emit("Gather", [xs, second], axis=0), g1])
        co = ctx.emit("Div", [ctx.emit("Gather", [gs, second], axis=0), g1])
        x5 = ctx.emit("Reshape", [x, ctx.emit("Concat", [n, ctx.const([g], torch.int64), ci, ctx.shape_of(x, start=2)],
                                              axis=0)])
        perm = [2, 1, 0, *range(3, spatial + 3)]
        xt = ctx.emit("Reshape", [ctx.emit("Transpose", [x5], perm=perm),
                                  ctx.emit("Concat", [ci, ctx.const([-1], torch.int64), ctx.shape_of(x, start=2)],
                                           axis=0)])
        g5 = ctx.emit("Reshape", [grad, ctx.emit("Concat", [n, ctx.const([g], torch.int64), co,
                                                            ctx.shape_of(grad, start=2)], axis=0)])
        gperm = [1, 2, 0, *range(3, spatial + 3)]
        gt = ctx.emit("Reshape", [ctx.emit("Transpose", [g5], perm=gperm),
                                  ctx.emit("Concat", [ctx.const([-1], torch.int64), n, ctx.shape_of(grad, start=2)],
                                           axis=0)])
        gw = ctx.emit("Conv", [xt, gt], strides=list(dilation), dilations=list(stride), pads=list(padding) * 2,
                      group=g)
        gw = ctx.emit("Transpose", [gw], perm=[1, 0, *range(2, rank)])
        spatial_axes = ctx.const(list(range(2, rank)), torch.int64)
        results[1] = ctx.emit("Slice", [gw, ctx.const([0] * spatial, torch.int64), ctx.shape_of(weight, start=2),
                                        spatial_axes], dtype=dtype)
    if output_mask[2]:
        results[2] = ctx.emit("ReduceSum", [grad, ctx.const(_channel_axes(rank), torch.int64)], keepdims=0,
                              dtype=dtype)
    return results


# -- pooling -----------------------------------------------------------------------------------------------------


def _pool_attrs(kernel_size: list[int], stride: list[int], padding: Any, ceil_mode: bool, k: int) -> dict[str, Any]:
    kernel = list(kernel_size) * (k if len(kernel_size) == 1 else 1)
    strides = list(stride) if stride else kernel
    strides = strides * (k if len(strides) == 1 else 1)
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    pads = pads * (k if len(pads) == 1 else 1)
    return {"kernel_shape": kernel, "strides": strides, "pads": pads * 2, "ceil_mode": int(bool(ceil_mode))}


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(ctx: ConversionContext, x: str, kernel_size: list[int], stride: list[int] = (),
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> list[str]:
    dtype = out_dtype(ctx)
    dil = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation]
    attrs = _pool_attrs(kernel_size, stride, padding, ceil_mode, 2)
    out, flat = ctx.emit("MaxPool", [x], outputs=2, dilations=dil * (2 if len(dil) == 1 else 1), **attrs)
    # ONNX indexes the whole tensor, torch each (n, c) plane
    plane = ctx.emit("ReduceProd", [ctx.shape_of(x, start=-2)], keepdims=1)
    return [ctx.emit("Identity", [out], dtype=dtype), ctx.emit("Mod", [flat, plane], fmod=0, dtype=torch.int64)]


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_backward(ctx: ConversionContext, grad: str, x: str, kernel_size: list[int], stride: list[int],
                        padding: Any, dilation: Any, ceil_mode: bool, indices: str) -> str:
    dtype = out_dtype(ctx)
    flat3 = ctx.const([0, 0, -1], torch.int64)
    zeros = ctx.emit("Expand", [ctx.const(0.0, dtype), ctx.shape_of(x)])
    zeros = ctx.emit("Reshape", [zeros, flat3])
    scattered = ctx.emit("ScatterElements", [zeros, ctx.emit("Reshape", [indices, flat3]),
                                             ctx.emit("Reshape", [grad, flat3])], axis=2, reduction="add")
    return ctx.emit("Reshape", [scattered, ctx.shape_of(x)], dtype=dtype)


def _no_divisor(node: torch.fx.Node) -> str | None:
    divisor = node.args[6] if len(node.args) > 6 else node.kwargs.get("divisor_override")
    return "avg_pool2d with divisor_override" if divisor is not None else None


@register(aten.avg_pool2d.default, supports=lambda n: _no_divisor(n) or no_float64("AveragePool")(n))
def avg_pool2d(ctx: ConversionContext, x: str, kernel_size: list[int], stride: list[int] = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> str:
    attrs = _pool_attrs(kernel_size, stride, padding, ceil_mode, 2)
    return ctx.emit("AveragePool", [x], count_include_pad=int(bool(count_include_pad)), dtype=out_dtype(ctx),
                    **attrs)


def _avg_backward_forms(node: torch.fx.Node) -> str | None:
    ceil_mode = node.args[5] if len(node.args) > 5 else node.kwargs.get("ceil_mode", False)
    divisor = node.args[7] if len(node.args) > 7 else node.kwargs.get("divisor_override")
    if ceil_mode or divisor is not None:
        return "avg_pool2d_backward with ceil_mode or divisor_override"
    return no_float64("ConvTranspose")(node)


@register(aten.avg_pool2d_backward.default, supports=_avg_backward_forms)
def avg_pool2d_backward(ctx: ConversionContext, grad: str, x: str, kernel_size: list[int], stride: list[int],
                        padding: Any, ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> str:
    dtype = out_dtype(ctx)
    attrs = _pool_attrs(kernel_size, stride, padding, ceil_mode, 2)
    window = attrs["kernel_shape"][0] * attrs["kernel_shape"][1]
    if count_include_pad:
        scaled = ctx.emit("Div", [grad, ctx.const(float(window), dtype)])
    else:  # each window's count of in-bounds elements: a sum pool of ones with zero padding
        plane = ctx.emit("Concat", [ctx.const([1, 1], torch.int64), ctx.shape_of(x, start=2)], axis=0)
        ones = ctx.emit("Expand", [ctx.const(1.0, dtype), plane])
        counts = ctx.emit("AveragePool", [ones], count_include_pad=1, **attrs)
        scaled = ctx.emit("Div", [grad, ctx.emit("Mul", [counts, ctx.const(float(window), dtype)])])
    # every (n, c) plane alone: a transposed convolution with a kernel of ones spreads each gradient over its window
    planes = ctx.emit("Reshape", [scaled, ctx.emit("Concat", [ctx.const([-1, 1], torch.int64),
                                                              ctx.shape_of(grad, start=2)], axis=0)])
    kernel = ctx.const(np.ones((1, 1, *attrs["kernel_shape"])), dtype)
    begin = attrs["pads"][:2]
    spread = ctx.emit("ConvTranspose", [planes, kernel], strides=attrs["strides"], pads=begin + [0, 0])
    return ctx.emit("Reshape", [_fit(ctx, spread, x), ctx.shape_of(x)], dtype=dtype)


def _fit(ctx: ConversionContext, t: str, like: str) -> str:
    """``t`` cut or zero-padded at the end of its spatial axes (2, 3, ...) to the spatial sizes of ``like``."""
    rank = ctx.rank_of(like)
    spatial = rank - 2
    axes = ctx.const(list(range(2, rank)), torch.int64)
    target = ctx.shape_of(like, start=2)
    t = ctx.emit("Slice", [t, ctx.const([0] * spatial, torch.int64), target, axes])
    missing = ctx.emit("Sub", [target, ctx.shape_of(t, start=2)])
    pads = ctx.emit("Concat", [ctx.const([0] * spatial, torch.int64), missing], axis=0)
    return ctx.emit("Pad", [t, pads, None, axes])


def _global_pool(node: torch.fx.Node) -> str | None:
    size = node.args[1]
    return None if all(isinstance(s, int) and s == 1 for s in size) else "adaptive_avg_pool2d to a size other than 1"


@register(aten._adaptive_avg_pool2d.default, supports=_global_pool)
def adaptive_avg_pool2d(ctx: ConversionContext, x: str, output_size: list[int]) -> str:
    return ctx.emit("ReduceMean", [x, ctx.const([-2, -1], torch.int64)], keepdims=1, dtype=out_dtype(ctx))


def _window_weights(ctx: ConversionContext, out_size: str, in_size: str, dtype: torch.dtype) -> str:
    """The (out, in) matrix of adaptive pooling along one axis: ``1 / len(window j)`` where input ``i`` lies in output
    ``j``'s window ``[floor(j * in / out), ceil((j + 1) * in / out))``, else 0 (0-d int64 sizes, any values)."""
    one = ctx.const(1, torch.int64)
    j = ctx.emit("Unsqueeze", [ctx.emit("Range", [ctx.const(0, torch.int64), out_size, one]),
                               ctx.const([1], torch.int64)])
    i = ctx.emit("Range", [ctx.const(0, torch.int64), in_size, one])
    start = ctx.emit("Div", [ctx.emit("Mul", [j, in_size]), out_size])
    last = ctx.emit("Sub", [out_size, one])
    end = ctx.emit("Div", [ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Add", [j, one]), in_size]), last]), out_size])
    inside = ctx.emit("And", [ctx.emit("GreaterOrEqual", [i, start]), ctx.emit("Less", [i, end])])
    length = ctx.cast(ctx.emit("Sub", [end, start]), dtype)
    return ctx.emit("Div", [ctx.cast(inside, dtype), length])


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(ctx: ConversionContext, grad: str, x: str) -> str:
    """Each output cell's gradient spread over its window, divided by the window's size: ``Wh^T @ grad @ Ww`` with
    the windows' weight matrices of both axes (any sizes, windows overlapping or not)."""
    dtype = out_dtype(ctx)
    h = ctx.rank_of(x) - 2
    sizes = [ctx.emit("Squeeze", [ctx.shape_of(t, start=a, end=a + 1)]) for t in (grad, x) for a in (h, h + 1)]
    rows = _window_weights(ctx, sizes[0], sizes[2], dtype)
    columns = _window_weights(ctx, sizes[1], sizes[3], dtype)
    spread = ctx.emit("MatMul", [ctx.emit("Transpose", [rows], perm=[1, 0]), ctx.cast(grad, dtype)])
    return ctx.emit("MatMul", [spread, columns], dtype=dtype)


__all__: list[str] = []
_ = INT64_MAX
