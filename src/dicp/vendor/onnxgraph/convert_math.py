"""onnxgraph converters: elementwise math, comparisons, casts, reductions, creation (contract: conversion.py)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .codegen import ConversionContext, onnx_dtype
from .convert_common import aten, common_dtype, no_float64, norm_dim, operand, out_dtype, prims, register

# -- elementwise binary ------------------------------------------------------------------------------------------


def _binary(op_type: str) -> Any:
    def convert(ctx: ConversionContext, a: Any, b: Any, **_: Any) -> str:
        dtype = out_dtype(ctx)
        return ctx.emit(op_type, [operand(ctx, a, dtype), operand(ctx, b, dtype)], dtype=dtype)

    return convert


for _targets, _op in (
    ([aten.mul.Tensor, aten.mul.Scalar], "Mul"),
    ([aten.maximum.default], "Max"),
    ([aten.minimum.default], "Min"),
    ([aten.pow.Tensor_Tensor, aten.pow.Scalar], "Pow"),
):
    register(_targets)(_binary(_op))


@register(aten.pow.Tensor_Scalar)
def pow_scalar(ctx: ConversionContext, a: Any, exponent: Any) -> str:
    """``x ** c``: the exponents eager's CPU kernel computes without ``pow`` (1, 2, 3, -1, -2 and, for floats,
    0.5 and -0.5) as the same products, roots and reciprocals (faster than ONNX ``Pow``, and eager's bits)."""
    dtype = out_dtype(ctx)
    x = operand(ctx, a, dtype)
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):  # a constant, not a SymFloat input
        floating = dtype.is_floating_point
        if exponent == 1:
            return x
        if exponent in (2, 3) or (exponent == -2 and floating):
            square = ctx.emit("Mul", [x, x], dtype=dtype)
            if exponent == 2:
                return square
            return ctx.emit("Mul", [square, x], dtype=dtype) if exponent == 3 else \
                ctx.emit("Reciprocal", [square], dtype=dtype)
        if exponent == -1 and floating:
            return ctx.emit("Reciprocal", [x], dtype=dtype)
        if exponent in (0.5, -0.5) and floating:
            root = ctx.emit("Sqrt", [x], dtype=dtype)
            return root if exponent == 0.5 else ctx.emit("Reciprocal", [root], dtype=dtype)
    return ctx.emit("Pow", [x, operand(ctx, exponent, dtype)], dtype=dtype)


def _alpha(ctx: ConversionContext, b: str, alpha: Any, dtype: torch.dtype) -> str:
    if alpha is None or (not isinstance(alpha, str) and alpha == 1):
        return b
    return ctx.emit("Mul", [b, operand(ctx, alpha, dtype)], dtype=dtype)


@register([aten.add.Tensor, aten.add.Scalar])
def add(ctx: ConversionContext, a: Any, b: Any, alpha: Any = None) -> str:
    dtype = out_dtype(ctx)
    if dtype == torch.bool:
        return ctx.emit("Or", [operand(ctx, a, dtype), operand(ctx, b, dtype)], dtype=dtype)
    return ctx.emit("Add", [operand(ctx, a, dtype), _alpha(ctx, operand(ctx, b, dtype), alpha, dtype)], dtype=dtype)


@register([aten.sub.Tensor, aten.sub.Scalar])
def sub(ctx: ConversionContext, a: Any, b: Any, alpha: Any = None) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Sub", [operand(ctx, a, dtype), _alpha(ctx, operand(ctx, b, dtype), alpha, dtype)], dtype=dtype)


@register([aten.rsub.Tensor, aten.rsub.Scalar])
def rsub(ctx: ConversionContext, a: Any, b: Any, alpha: Any = None) -> str:
    return sub(ctx, b, a, alpha)


def _floor_div(ctx: ConversionContext, a: str, b: str, dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return ctx.emit("Floor", [ctx.emit("Div", [a, b])], dtype=dtype)
    rem = ctx.emit("Mod", [a, b], fmod=0)  # sign of the divisor: a - rem is a multiple of b
    return ctx.emit("Div", [ctx.emit("Sub", [a, rem]), b], dtype=dtype)


def _trunc(ctx: ConversionContext, x: str, dtype: torch.dtype) -> str:
    floor = ctx.emit("Floor", [ctx.emit("Abs", [x])])
    return ctx.emit("Mul", [ctx.emit("Sign", [x]), floor], dtype=dtype)


@register([aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode, aten.floor_divide.default])
def div(ctx: ConversionContext, a: Any, b: Any, rounding_mode: str | None = None) -> str:
    dtype = out_dtype(ctx)
    if ctx.node.target is aten.floor_divide.default:
        rounding_mode = "floor"
    a, b = operand(ctx, a, dtype), operand(ctx, b, dtype)
    if rounding_mode == "floor":
        return _floor_div(ctx, a, b, dtype)
    quotient = ctx.emit("Div", [a, b], dtype=dtype)
    return _trunc(ctx, quotient, dtype) if rounding_mode == "trunc" and dtype.is_floating_point else quotient


@register([aten.remainder.Tensor, aten.remainder.Scalar])
def remainder(ctx: ConversionContext, a: Any, b: Any) -> str:
    dtype = out_dtype(ctx)
    a, b = operand(ctx, a, dtype), operand(ctx, b, dtype)
    if not dtype.is_floating_point:
        return ctx.emit("Mod", [a, b], fmod=0, dtype=dtype)
    floor = ctx.emit("Floor", [ctx.emit("Div", [a, b])])
    return ctx.emit("Sub", [a, ctx.emit("Mul", [floor, b])], dtype=dtype)


@register([aten.fmod.Tensor, aten.fmod.Scalar])
def fmod(ctx: ConversionContext, a: Any, b: Any) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Mod", [operand(ctx, a, dtype), operand(ctx, b, dtype)], fmod=1, dtype=dtype)


def _bitwise(bool_op: str, int_op: str) -> Any:
    def convert(ctx: ConversionContext, a: Any, b: Any) -> str:
        dtype = out_dtype(ctx)
        op = bool_op if dtype == torch.bool else int_op
        return ctx.emit(op, [operand(ctx, a, dtype), operand(ctx, b, dtype)], dtype=dtype)

    return convert


register([aten.bitwise_and.Tensor, aten.bitwise_and.Scalar])(_bitwise("And", "BitwiseAnd"))
register([aten.bitwise_or.Tensor, aten.bitwise_or.Scalar])(_bitwise("Or", "BitwiseOr"))
register([aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar])(_bitwise("Xor", "BitwiseXor"))


@register(aten.bitwise_not.default)
def bitwise_not(ctx: ConversionContext, x: str) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Not" if dtype == torch.bool else "BitwiseNot", [x], dtype=dtype)


def _logical(op: str) -> Any:
    def convert(ctx: ConversionContext, a: str, b: str) -> str:
        return ctx.emit(op, [operand(ctx, a, torch.bool), operand(ctx, b, torch.bool)], dtype=torch.bool)

    return convert


register(aten.logical_and.default)(_logical("And"))
register(aten.logical_or.default)(_logical("Or"))
register(aten.logical_xor.default)(_logical("Xor"))


@register(aten.logical_not.default)
def logical_not(ctx: ConversionContext, x: str) -> str:
    return ctx.emit("Not", [ctx.cast(x, torch.bool)], dtype=torch.bool)


def _compare(op_type: str, negate: bool = False) -> Any:
    def convert(ctx: ConversionContext, a: Any, b: Any) -> str:
        dtype = common_dtype(ctx, a, b)
        result = ctx.emit(op_type, [operand(ctx, a, dtype), operand(ctx, b, dtype)], dtype=torch.bool)
        return ctx.emit("Not", [result], dtype=torch.bool) if negate else result

    return convert


for _packet, _op, _neg in ((aten.eq, "Equal", False), (aten.ne, "Equal", True), (aten.lt, "Less", False),
                           (aten.le, "LessOrEqual", False), (aten.gt, "Greater", False),
                           (aten.ge, "GreaterOrEqual", False)):
    register([_packet.Tensor, _packet.Scalar])(_compare(_op, _neg))

# -- elementwise unary -------------------------------------------------------------------------------------------


#: ONNX ops ONNX Runtime's CPU provider runs in float32 but not float64.
_NO_DOUBLE = {"Erf", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh"}


def _unary(*op_types: str) -> Any:
    def convert(ctx: ConversionContext, x: str) -> str:
        dtype = out_dtype(ctx)
        x = ctx.cast(x, dtype)
        for op_type in op_types:
            x = ctx.emit(op_type, [x], dtype=dtype)
        return x

    return convert


for _target, _ops in (
    (aten.neg.default, ("Neg",)), (aten.abs.default, ("Abs",)), (aten.exp.default, ("Exp",)),
    (aten.log.default, ("Log",)), (aten.sqrt.default, ("Sqrt",)), (aten.rsqrt.default, ("Sqrt", "Reciprocal")),
    (aten.reciprocal.default, ("Reciprocal",)), (aten.sin.default, ("Sin",)), (aten.cos.default, ("Cos",)),
    (aten.tan.default, ("Tan",)), (aten.tanh.default, ("Tanh",)), (aten.sigmoid.default, ("Sigmoid",)),
    (aten.relu.default, ("Relu",)), (aten.erf.default, ("Erf",)), (aten.floor.default, ("Floor",)),
    (aten.ceil.default, ("Ceil",)), (aten.round.default, ("Round",)), (aten.sign.default, ("Sign",)),
    (aten.asin.default, ("Asin",)), (aten.acos.default, ("Acos",)), (aten.atan.default, ("Atan",)),
    (aten.sinh.default, ("Sinh",)), (aten.cosh.default, ("Cosh",)),
):
    _lacking = [op for op in _ops if op in _NO_DOUBLE]
    register(_target, supports=no_float64(_lacking[0]) if _lacking else None)(_unary(*_ops))


@register(aten.trunc.default)
def trunc(ctx: ConversionContext, x: str) -> str:
    return _trunc(ctx, x, out_dtype(ctx))


@register([aten.log1p.default, aten.log2.default, aten.expm1.default, aten.exp2.default])
def log_family(ctx: ConversionContext, x: str) -> str:
    dtype = out_dtype(ctx)
    x = ctx.cast(x, dtype)
    one = ctx.const(1.0, dtype)
    target = ctx.node.target
    if target is aten.log1p.default:
        return ctx.emit("Log", [ctx.emit("Add", [x, one])], dtype=dtype)
    if target is aten.log2.default:
        return ctx.emit("Div", [ctx.emit("Log", [x]), ctx.const(math.log(2.0), dtype)], dtype=dtype)
    if target is aten.exp2.default:
        return ctx.emit("Pow", [ctx.const(2.0, dtype), x], dtype=dtype)
    return ctx.emit("Sub", [ctx.emit("Exp", [x]), one], dtype=dtype)


@register([aten.isnan.default, aten.isinf.default])
def isnan(ctx: ConversionContext, x: str) -> str:
    op = "IsNaN" if ctx.node.target is aten.isnan.default else "IsInf"
    if not ctx.dtype_of(x).is_floating_point:
        return ctx.emit("Expand", [ctx.const(False, torch.bool), ctx.shape_of(x)], dtype=torch.bool)
    return ctx.emit(op, [x], dtype=torch.bool)


@register([aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
           aten.clamp_min.Tensor, aten.clamp_max.Tensor, aten.hardtanh.default])
def clamp(ctx: ConversionContext, x: str, lo: Any = None, hi: Any = None, **_: Any) -> str:
    dtype = out_dtype(ctx)
    target = ctx.node.target
    if target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        lo, hi = None, lo
    if target is aten.hardtanh.default:
        lo, hi = -1.0 if lo is None else lo, 1.0 if hi is None else hi
    x = ctx.cast(x, dtype)
    if lo is not None:
        x = ctx.emit("Max", [x, operand(ctx, lo, dtype)], dtype=dtype)
    if hi is not None:
        x = ctx.emit("Min", [x, operand(ctx, hi, dtype)], dtype=dtype)
    return x


@register(aten.leaky_relu.default)
def leaky_relu(ctx: ConversionContext, x: str, negative_slope: float = 0.01) -> str:
    return ctx.emit("LeakyRelu", [x], alpha=float(negative_slope), dtype=out_dtype(ctx))


@register(aten.gelu.default, supports=no_float64("Erf"))
def gelu(ctx: ConversionContext, x: str, approximate: str = "none") -> str:
    dtype = out_dtype(ctx)
    half = ctx.emit("Mul", [x, ctx.const(0.5, dtype)])
    if approximate == "tanh":
        cube = ctx.emit("Mul", [ctx.emit("Mul", [x, x]), x])
        inner = ctx.emit("Add", [x, ctx.emit("Mul", [cube, ctx.const(0.044715, dtype)])])
        inner = ctx.emit("Mul", [inner, ctx.const(math.sqrt(2.0 / math.pi), dtype)])
        return ctx.emit("Mul", [half, ctx.emit("Add", [ctx.emit("Tanh", [inner]), ctx.const(1.0, dtype)])],
                        dtype=dtype)
    erf = ctx.emit("Erf", [ctx.emit("Mul", [x, ctx.const(1.0 / math.sqrt(2.0), dtype)])])
    return ctx.emit("Mul", [half, ctx.emit("Add", [erf, ctx.const(1.0, dtype)])], dtype=dtype)


@register(aten.silu.default)
def silu(ctx: ConversionContext, x: str) -> str:
    return ctx.emit("Mul", [x, ctx.emit("Sigmoid", [x])], dtype=out_dtype(ctx))


@register(aten.sigmoid_backward.default)
def sigmoid_backward(ctx: ConversionContext, grad: str, y: str) -> str:
    dtype = out_dtype(ctx)
    one_minus = ctx.emit("Sub", [ctx.const(1.0, dtype), y])
    return ctx.emit("Mul", [grad, ctx.emit("Mul", [y, one_minus])], dtype=dtype)


@register(aten.tanh_backward.default)
def tanh_backward(ctx: ConversionContext, grad: str, y: str) -> str:
    dtype = out_dtype(ctx)
    one_minus = ctx.emit("Sub", [ctx.const(1.0, dtype), ctx.emit("Mul", [y, y])])
    return ctx.emit("Mul", [grad, one_minus], dtype=dtype)


@register(aten.threshold_backward.default)
def threshold_backward(ctx: ConversionContext, grad: str, x: str, threshold: Any) -> str:
    dtype = out_dtype(ctx)
    below = ctx.emit("LessOrEqual", [x, operand(ctx, threshold, ctx.dtype_of(x))])
    return ctx.emit("Where", [below, ctx.const(0, dtype), grad], dtype=dtype)


# -- where, fill, casts ------------------------------------------------------------------------------------------


@register([aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar])
def where(ctx: ConversionContext, cond: str, a: Any, b: Any) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Where", [ctx.cast(cond, torch.bool), operand(ctx, a, dtype), operand(ctx, b, dtype)],
                    dtype=dtype)


@register([aten.masked_fill.Scalar, aten.masked_fill.Tensor])
def masked_fill(ctx: ConversionContext, x: str, mask: str, value: Any) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Where", [ctx.cast(mask, torch.bool), operand(ctx, value, dtype), ctx.cast(x, dtype)],
                    dtype=dtype)


@register([aten.fill.Scalar, aten.fill.Tensor, aten.full_like.default, aten.zeros_like.default,
           aten.ones_like.default, aten.empty_like.default])
def fill(ctx: ConversionContext, x: str, value: Any = 0, **_: Any) -> str:
    dtype = out_dtype(ctx)
    target = ctx.node.target
    if target is aten.ones_like.default:
        value = 1
    elif target in (aten.zeros_like.default, aten.empty_like.default):
        value = 0
    return ctx.emit("Expand", [operand(ctx, value, dtype), ctx.shape_of(x)], dtype=dtype)


def _same_device(node: torch.fx.Node) -> str | None:
    src, out = node.args[0].meta.get("val"), node.meta.get("val")
    if isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor) and src.device != out.device:
        return f"device change {src.device} -> {out.device} stays eager"
    return None


@register([aten._to_copy.default, prims.convert_element_type.default], supports=_same_device)
def to_copy(ctx: ConversionContext, x: str, dtype: Any = None, **_: Any) -> str:
    return ctx.cast(x, out_dtype(ctx))


@register([aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default,
           aten.contiguous.default])
def identity(ctx: ConversionContext, x: str, **_: Any) -> str:
    return ctx.emit("Identity", [x], dtype=out_dtype(ctx))


@register(aten.copy.default)
def copy(ctx: ConversionContext, dst: str, src: str, non_blocking: bool = False) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Expand", [ctx.cast(src, dtype), ctx.shape_of(dst)], dtype=dtype)


# -- creation ----------------------------------------------------------------------------------------------------


_NEW = (aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
        aten.new_empty_strided.default)


@register([aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format, *_NEW])
def full(ctx: ConversionContext, *args: Any, **_: Any) -> str:
    """A filled tensor (an empty one is zeros; a strided one's strides are the vendor's, as its values)."""
    dtype = out_dtype(ctx)
    target = ctx.node.target
    if target in _NEW:
        args = args[1:]
    size = args[0]
    value = {aten.ones.default: 1, aten.new_ones.default: 1}.get(target, 0)
    if target in (aten.full.default, aten.new_full.default):
        value = args[1]
    return ctx.emit("Expand", [operand(ctx, value, dtype), ctx.sizes(list(size))], dtype=dtype)


@register(aten.scalar_tensor.default)
def scalar_tensor(ctx: ConversionContext, value: Any, **_: Any) -> str:
    dtype = out_dtype(ctx)
    return ctx.emit("Identity", [ctx.scalar(value, dtype)], dtype=dtype)


@register([aten.arange.default, aten.arange.start, aten.arange.start_step])
def arange(ctx: ConversionContext, *args: Any, **_: Any) -> str:
    dtype = out_dtype(ctx)
    nums = [a for a in args if not isinstance(a, torch.dtype)][:3]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    return ctx.emit("Range", [ctx.scalar(start, dtype), ctx.scalar(end, dtype), ctx.scalar(step, dtype)],
                    dtype=dtype)


@register(prims.iota.default)
def iota(ctx: ConversionContext, length: Any, *, start: Any, step: Any, **_: Any) -> str:
    dtype = out_dtype(ctx)
    first, delta = ctx.scalar(start, dtype), ctx.scalar(step, dtype)
    end = ctx.emit("Add", [first, ctx.emit("Mul", [ctx.scalar(length, dtype), delta])])
    return ctx.emit("Range", [first, end, delta], dtype=dtype)


@register([aten.tril.default, aten.triu.default])
def trilu(ctx: ConversionContext, x: str, diagonal: Any = 0) -> str:
    upper = int(ctx.node.target is aten.triu.default)
    return ctx.emit("Trilu", [x, ctx.scalar(diagonal, torch.int64)], upper=upper, dtype=out_dtype(ctx))


# -- reductions --------------------------------------------------------------------------------------------------


def _axes(ctx: ConversionContext, x: str, dim: Any) -> list[int] | None:
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return None
    rank = ctx.rank_of(x)
    return sorted(norm_dim(d, rank) for d in dims)


def _reduce(ctx: ConversionContext, op: str, x: str, dim: Any, keepdim: bool, dtype: torch.dtype) -> str:
    x = ctx.cast(x, dtype)
    axes = _axes(ctx, x, dim)
    if ctx.rank_of(x) == 0:
        return ctx.emit("Identity", [x], dtype=dtype)
    inputs = [x] if axes is None else [x, ctx.const(axes, torch.int64)]
    return ctx.emit(op, inputs, keepdims=int(bool(keepdim)), dtype=dtype)


@register([aten.sum.default, aten.sum.dim_IntList])
def sum_(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False, **_: Any) -> str:
    return _reduce(ctx, "ReduceSum", x, dim, keepdim, out_dtype(ctx))


@register([aten.mean.default, aten.mean.dim])
def mean(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False, **_: Any) -> str:
    return _reduce(ctx, "ReduceMean", x, dim, keepdim, out_dtype(ctx))


@register([aten.amax.default, aten.amin.default, aten.max.default, aten.min.default])
def amax(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False) -> str:
    op = "ReduceMax" if ctx.node.target in (aten.amax.default, aten.max.default) else "ReduceMin"
    return _reduce(ctx, op, x, dim, keepdim, out_dtype(ctx))


@register([aten.prod.default, aten.prod.dim_int])
def prod(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False, **_: Any) -> str:
    return _reduce(ctx, "ReduceProd", x, dim, keepdim, out_dtype(ctx))


@register([aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims])
def any_all(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False) -> str:
    op = "ReduceMax" if ctx.node.target in (aten.any.default, aten.any.dim, aten.any.dims) else "ReduceMin"
    if ctx.node.target in (aten.any.dims, aten.all.dims) and dim is not None and len(dim) == 0:
        return ctx.cast(x, torch.bool)  # an empty dim list reduces nothing (unlike sum's)
    flags = ctx.cast(ctx.cast(x, torch.bool), torch.int32)
    return ctx.cast(_reduce(ctx, op, flags, dim, keepdim, torch.int32), torch.bool)


def _count(ctx: ConversionContext, x: str, axes: list[int] | None, dtype: torch.dtype) -> str:
    shape = ctx.shape_of(x)
    if axes is not None:
        shape = ctx.emit("Gather", [shape, ctx.const(axes, torch.int64)], axis=0)
    return ctx.cast(ctx.emit("ReduceProd", [shape], keepdims=0, dtype=torch.int64), dtype)


@register([aten.var.correction, aten.var_mean.correction])
def var(ctx: ConversionContext, x: str, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    dtype = out_dtype(ctx)
    x = ctx.cast(x, dtype)
    axes = _axes(ctx, x, dim)
    axes_in = [] if axes is None else [ctx.const(axes, torch.int64)]
    mu = ctx.emit("ReduceMean", [x, *axes_in], keepdims=1)
    diff = ctx.emit("Sub", [x, mu])
    total = ctx.emit("ReduceSum", [ctx.emit("Mul", [diff, diff]), *axes_in], keepdims=int(bool(keepdim)))
    correction = 1 if correction is None else correction
    denom = ctx.emit("Sub", [_count(ctx, x, axes, dtype), ctx.scalar(correction, dtype)])
    denom = ctx.emit("Max", [denom, ctx.const(0.0, dtype)])
    result = ctx.emit("Div", [total, denom], dtype=dtype)
    if ctx.node.target is aten.var_mean.correction:
        mean_out = mu if keepdim else ctx.emit("ReduceMean", [x, *axes_in], keepdims=0, dtype=dtype)
        return [result, mean_out]
    return result


def _arg(ctx: ConversionContext, op: str, x: str, dim: Any, keepdim: bool) -> str:
    if dim is None:
        x = ctx.emit("Reshape", [x, ctx.const([-1], torch.int64)])
        return ctx.emit(op, [x], axis=0, keepdims=0, dtype=torch.int64)
    if ctx.rank_of(x) == 0:
        return ctx.const(0, torch.int64)
    return ctx.emit(op, [x], axis=norm_dim(dim, ctx.rank_of(x)), keepdims=int(bool(keepdim)), dtype=torch.int64)


@register([aten.argmax.default, aten.argmin.default])
def argmax(ctx: ConversionContext, x: str, dim: Any = None, keepdim: bool = False) -> str:
    return _arg(ctx, "ArgMax" if ctx.node.target is aten.argmax.default else "ArgMin", x, dim, keepdim)


@register([aten.max.dim, aten.min.dim])
def max_dim(ctx: ConversionContext, x: str, dim: int, keepdim: bool = False) -> list[str]:
    is_max = ctx.node.target is aten.max.dim
    values = _reduce(ctx, "ReduceMax" if is_max else "ReduceMin", x, dim, keepdim, out_dtype(ctx))
    return [values, _arg(ctx, "ArgMax" if is_max else "ArgMin", x, dim, keepdim)]


@register(aten.cumsum.default)
def cumsum(ctx: ConversionContext, x: str, dim: int, dtype: Any = None) -> str:
    out = out_dtype(ctx)
    return ctx.emit("CumSum", [ctx.cast(x, out), ctx.const(norm_dim(dim, ctx.rank_of(x)), torch.int64)], dtype=out)


@register(aten.topk.default)
def topk(ctx: ConversionContext, x: str, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True
         ) -> list[str]:
    axis = norm_dim(dim, ctx.rank_of(x))
    values, indices = ctx.emit("TopK", [x, ctx.sizes([k])], outputs=2, axis=axis, largest=int(largest),
                               sorted=1)
    return [values, indices]


__all__: list[str] = []
_ = onnx_dtype
