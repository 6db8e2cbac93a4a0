"""The single-op cases of tests/dicp/test_onnx_ops.py: one ATen call (or a short chain) per case, with inputs
made for a size ``n`` (the dynamic run compiles at n=4 and runs at n=4 and n=6)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CASES", "Case"]

aten = torch.ops.aten
prims = torch.ops.prims


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    make: Callable[[int], list[torch.Tensor]]


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _pos(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) + 0.5


def _i(*shape: int, high: int = 10) -> torch.Tensor:
    return torch.randint(-high, high, shape)


def _b(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) > 0.5


def x1(n: int) -> list[torch.Tensor]:
    return [_r(n, 3)]


def x2(n: int) -> list[torch.Tensor]:
    return [_r(n, 3), _r(n, 3)]


CASES: list[Case] = []


def case(name: str, make: Callable[[int], list[torch.Tensor]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(name, fn, make))
        return fn

    return add


def _bin(op: Any) -> Callable[..., Any]:
    return lambda a, b: op(a, b)


def _un(op: Any) -> Callable[..., Any]:
    return lambda a: op(a)


def _with(op: Any, value: Any) -> Callable[..., Any]:
    return lambda a: op(a, value)


def simple(name: str, fn: Callable[..., Any], make: Callable[[int], list[torch.Tensor]] = x1) -> None:
    CASES.append(Case(name, fn, make))


# -- elementwise binary --------------------------------------------------------------------------------------------
simple("add.Tensor", lambda a, b: aten.add.Tensor(a, b, alpha=2), x2)
simple("add.Tensor_bcast_int", lambda a, b: aten.add.Tensor(a, b), lambda n: [_r(n, 3), _i(3)])
simple("add.Scalar", lambda a: aten.add.Scalar(a, 2.5))
simple("add.Tensor_int_alpha", lambda a, b: aten.add.Tensor(a, b, alpha=3), lambda n: [_i(n, 3), _i(n, 3)])
simple("sub.Tensor", lambda a, b: aten.sub.Tensor(a, b), x2)
simple("sub.Scalar", lambda a: aten.sub.Scalar(a, 1.5))
simple("rsub.Tensor", lambda a, b: aten.rsub.Tensor(a, b), x2)
simple("rsub.Scalar", lambda a: aten.rsub.Scalar(a, 1.0))
simple("mul.Tensor", lambda a, b: aten.mul.Tensor(a, b), x2)
simple("mul.Scalar", lambda a: aten.mul.Scalar(a, -3.0))
simple("mul.Tensor_bool", lambda a, b: aten.mul.Tensor(a, b), lambda n: [_b(n, 3), _r(n, 3)])
simple("div.Tensor", lambda a, b: aten.div.Tensor(a, b), lambda n: [_r(n, 3), _pos(n, 3)])
simple("div.Scalar", lambda a: aten.div.Scalar(a, 4.0))
simple("div.Tensor_mode_floor", lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode="floor"),
       lambda n: [_r(n, 3) * 5, _pos(n, 3)])
simple("div.Tensor_mode_trunc", lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode="trunc"),
       lambda n: [_r(n, 3) * 5, _pos(n, 3)])
simple("div.Scalar_mode_int", lambda a: aten.div.Scalar_mode(a, 3, rounding_mode="floor"), lambda n: [_i(n, 3)])
simple("floor_divide_int", lambda a, b: aten.floor_divide.default(a, b),
       lambda n: [_i(n, 3), torch.randint(1, 5, (n, 3))])
simple("remainder.Tensor", lambda a, b: aten.remainder.Tensor(a, b), lambda n: [_r(n, 3) * 5, _pos(n, 3)])
simple("remainder.Scalar_int", lambda a: aten.remainder.Scalar(a, 3), lambda n: [_i(n, 3)])
simple("fmod.Scalar", lambda a: aten.fmod.Scalar(a, 0.7))
simple("fmod.Tensor", lambda a, b: aten.fmod.Tensor(a, b), lambda n: [_r(n, 3) * 5, -_pos(n, 3)])
simple("fmod.Tensor_int", lambda a, b: aten.fmod.Tensor(a, b), lambda n: [_i(n, 3), torch.randint(1, 4, (n, 3))])
simple("pow.Tensor_Scalar", lambda a: aten.pow.Tensor_Scalar(a, 3), lambda n: [_r(n, 3)])
simple("pow.Tensor_Tensor", lambda a, b: aten.pow.Tensor_Tensor(a, b), lambda n: [_pos(n, 3), _r(n, 3)])
simple("pow.Scalar", lambda a: aten.pow.Scalar(2.0, a))
simple("maximum", lambda a, b: aten.maximum.default(a, b), x2)
simple("minimum", lambda a, b: aten.minimum.default(a, b), x2)
simple("maximum_int", lambda a, b: aten.maximum.default(a, b), lambda n: [_i(n, 3), _i(n, 3)])
simple("bitwise_and.Tensor", lambda a, b: aten.bitwise_and.Tensor(a, b), lambda n: [_i(n, 3), _i(n, 3)])
simple("bitwise_or.Tensor_bool", lambda a, b: aten.bitwise_or.Tensor(a, b), lambda n: [_b(n, 3), _b(n, 3)])
simple("bitwise_xor.Tensor", lambda a, b: aten.bitwise_xor.Tensor(a, b), lambda n: [_i(n, 3), _i(n, 3)])
simple("bitwise_and.Scalar", lambda a: aten.bitwise_and.Scalar(a, 6), lambda n: [_i(n, 3)])
simple("bitwise_or.Scalar_neg", lambda a: aten.bitwise_or.Scalar(a, -8), lambda n: [_i(n, 3)])
simple("bitwise_xor.Scalar_bool", lambda a: aten.bitwise_xor.Scalar(a, True), lambda n: [_b(n, 3)])
simple("bitwise_not_bool", lambda a: aten.bitwise_not.default(a), lambda n: [_b(n, 3)])
simple("logical_and", lambda a, b: aten.logical_and.default(a, b), lambda n: [_b(n, 3), _r(n, 3)])
simple("logical_or", lambda a, b: aten.logical_or.default(a, b), lambda n: [_b(n, 3), _b(n, 3)])
simple("logical_xor", lambda a, b: aten.logical_xor.default(a, b), lambda n: [_b(n, 3), _b(n, 3)])
simple("logical_not", lambda a: aten.logical_not.default(a), lambda n: [_i(n, 3, high=2)])
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    simple(f"{_cmp}.Tensor", _bin(getattr(aten, _cmp).Tensor),
           lambda n: [torch.randint(0, 3, (n, 3)).float(), torch.randint(0, 3, (n, 3)).float()])
    simple(f"{_cmp}.Scalar", _with(getattr(aten, _cmp).Scalar, 1), lambda n: [_i(n, 3, high=3)])

# -- elementwise unary ---------------------------------------------------------------------------------------------
for _name in ("neg", "abs", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "round",
              "sign", "trunc", "atan", "sinh", "cosh", "expm1", "exp2"):
    simple(_name, _un(getattr(aten, _name).default))
for _name in ("log", "sqrt", "rsqrt", "reciprocal", "log1p", "log2"):
    simple(_name, _un(getattr(aten, _name).default), lambda n: [_pos(n, 3)])
simple("tan", lambda a: aten.tan.default(a), lambda n: [torch.rand(n, 3) - 0.5])
simple("asin", lambda a: aten.asin.default(a), lambda n: [torch.rand(n, 3) - 0.5])
simple("acos", lambda a: aten.acos.default(a), lambda n: [torch.rand(n, 3) - 0.5])
simple("isnan", lambda a: aten.isnan.default(aten.log.default(a)), x1)
simple("isinf", lambda a: aten.isinf.default(aten.reciprocal.default(aten.relu.default(a))), x1)
simple("clamp", lambda a: aten.clamp.default(a, -0.5, 0.5))
simple("clamp.Tensor", lambda a, lo: aten.clamp.Tensor(a, lo), x2)
simple("clamp_min", lambda a: aten.clamp_min.default(a, 0.1))
simple("clamp_max", lambda a: aten.clamp_max.default(a, 0.1))
simple("clamp_min.Tensor", lambda a, b: aten.clamp_min.Tensor(a, b), lambda n: [_r(n, 3), _r(3)])
simple("clamp_max.Tensor_int", lambda a, b: aten.clamp_max.Tensor(a, b), lambda n: [_i(n, 3), _i(n, 3)])
simple("abs_int", lambda a: aten.abs.default(a), lambda n: [_i(n, 3)])
simple("hardtanh", lambda a: aten.hardtanh.default(a, -0.3, 0.7))
simple("leaky_relu", lambda a: aten.leaky_relu.default(a, 0.2))
simple("gelu", lambda a: aten.gelu.default(a))
simple("gelu_tanh", lambda a: aten.gelu.default(a, approximate="tanh"))
simple("silu", lambda a: aten.silu.default(a))
simple("gelu_backward", lambda g, a: aten.gelu_backward.default(g, a), x2)
simple("silu_backward", lambda g, a: aten.silu_backward.default(g, a), x2)
simple("sigmoid_backward", lambda g, y: aten.sigmoid_backward.default(g, y), x2)
simple("tanh_backward", lambda g, y: aten.tanh_backward.default(g, y), x2)
simple("threshold_backward", lambda g, a: aten.threshold_backward.default(g, a, 0.0), x2)
simple("leaky_relu_backward", lambda g, a: aten.leaky_relu_backward.default(g, a, 0.2, False), x2)
simple("softplus", lambda a: aten.softplus.default(a, 1.0, 20.0))
simple("hardswish", lambda a: aten.hardswish.default(a))
simple("mish", lambda a: aten.mish.default(a))
simple("addcmul", lambda a, b: aten.addcmul.default(a, b, b, value=0.5), x2)
simple("lerp.Scalar", lambda a, b: aten.lerp.Scalar(a, b, 0.3), x2)

# -- where, fill, casts, creation ----------------------------------------------------------------------------------
simple("where.self", lambda c, a, b: aten.where.self(c, a, b), lambda n: [_b(n, 3), _r(n, 3), _r(n, 3)])
simple("where.ScalarOther", lambda c, a: aten.where.ScalarOther(c, a, 0.5), lambda n: [_b(n, 3), _r(n, 3)])
simple("where.ScalarSelf", lambda c, a: aten.where.ScalarSelf(c, 0.5, a), lambda n: [_b(n, 3), _r(n, 3)])
simple("where.Scalar", lambda c: aten.where.Scalar(c, 1.5, -2.0), lambda n: [_b(n, 3)])
simple("where.self_int", lambda c, a, b: aten.where.self(c, a, b), lambda n: [_b(n, 3), _i(n, 3), _i(n, 3)])
simple("masked_fill.Scalar", lambda a, m: aten.masked_fill.Scalar(a, m, -1e9), lambda n: [_r(n, 3), _b(n, 3)])
simple("masked_fill.Tensor", lambda a, m, v: aten.masked_fill.Tensor(a, m, v),
       lambda n: [_r(n, 3), _b(n, 3), torch.tensor(2.0)])
simple("fill.Scalar", lambda a: aten.fill.Scalar(a, 3.0))
simple("fill.Tensor", lambda a, v: aten.fill.Tensor(a, v), lambda n: [_r(n, 3), torch.tensor(2.5)])
simple("fill.Tensor_int", lambda a, v: aten.fill.Tensor(a, v), lambda n: [_i(n, 3), torch.tensor(2.7)])
# empty memory is only read after fill_ overwrote it (or for its shape), so the outputs are deterministic
simple("empty_like", lambda a: aten.add.Tensor(aten.fill.Scalar(aten.empty_like.default(a), 2.0), a))
simple("empty_like_int",
       lambda a: aten.add.Tensor(aten.fill.Scalar(aten.empty_like.default(a, dtype=torch.int32), 1), a),
       lambda n: [_i(n, 3)])
simple("empty.memory_format",
       lambda a: aten.mul.Tensor(aten.fill.Scalar(aten.empty.memory_format([a.shape[0], 3]), 2.0), a))
simple("new_empty", lambda a: aten.fill.Scalar(aten.new_empty.default(a, [2, a.shape[0]], dtype=torch.int64), 4))
simple("full_like", lambda a: aten.full_like.default(a, 7.0))
simple("zeros_like", lambda a: aten.zeros_like.default(a))
simple("ones_like", lambda a: aten.ones_like.default(a, dtype=torch.int64))
simple("_to_copy_int", lambda a: aten._to_copy.default(a * 10, dtype=torch.int32))
simple("_to_copy_half", lambda a: aten._to_copy.default(a, dtype=torch.float16))
simple("convert_element_type", lambda a: prims.convert_element_type.default(a, torch.float64))
simple("clone", lambda a: aten.clone.default(a))
simple("alias", lambda a: aten.alias.default(a) + 1)
simple("detach", lambda a: aten.detach.default(a) + 1)
simple("detach_int", lambda a: aten.detach.default(a), lambda n: [_i(n, 3)])
simple("lift_fresh_copy", lambda a: aten.lift_fresh_copy.default(a) * 2)
simple("copy", lambda a, b: aten.copy.default(a, b), lambda n: [_r(n, 3), _i(3)])
simple("full", lambda a: aten.add.Tensor(a, aten.full.default([a.shape[0], 3], 2.0)))
simple("zeros", lambda a: aten.add.Tensor(a, aten.zeros.default([a.shape[0], 1])))
simple("ones", lambda a: aten.add.Tensor(a, aten.ones.default([3])))
simple("new_zeros", lambda a: aten.add.Tensor(a, aten.new_zeros.default(a, [a.shape[0], 3])))
simple("new_ones", lambda a: aten.add.Tensor(a, aten.new_ones.default(a, [1, 3])))
simple("arange", lambda a: aten.add.Tensor(a, aten.arange.default(3, dtype=torch.float32)))
simple("arange.start_step", lambda a: aten.mul.Tensor(aten.arange.start_step(1, a.shape[0] * 2 + 1, 2),
                                                       aten.sum.dim_IntList(a, [1])))
simple("arange.start", lambda a: aten.arange.start(2, a.shape[0] + 2))
simple("iota", lambda a: prims.iota.default(a.shape[0], start=3, step=2, dtype=torch.int64,
                                            device=torch.device("cpu"), requires_grad=False))
simple("scalar_tensor", lambda a: aten.mul.Tensor(a, aten.scalar_tensor.default(2.0)))
simple("tril", lambda a: aten.tril.default(a, 1), lambda n: [_r(n, n)])
simple("triu", lambda a: aten.triu.default(a), lambda n: [_r(n, n)])

# -- reductions ----------------------------------------------------------------------------------------------------
simple("sum.default", lambda a: aten.sum.default(a))
simple("sum.dim_IntList", lambda a: aten.sum.dim_IntList(a, [0], keepdim=True))
simple("sum_bool", lambda a: aten.sum.dim_IntList(a, [1]), lambda n: [_b(n, 3)])
simple("sum_int", lambda a: aten.sum.dim_IntList(a, [0]), lambda n: [_i(n, 3)])
simple("mean.default", lambda a: aten.mean.default(a))
simple("mean.dim", lambda a: aten.mean.dim(a, [-1]))
simple("amax", lambda a: aten.amax.default(a, [1]))
simple("amin", lambda a: aten.amin.default(a, [0], True))
simple("max.default", lambda a: aten.max.default(a))
simple("min.default", lambda a: aten.min.default(a))
simple("max.dim", lambda a: aten.max.dim(a, 1))
simple("min.dim", lambda a: aten.min.dim(a, 0, True))
simple("max.dim_int", lambda a: aten.max.dim(a, 1), lambda n: [torch.randperm(n * 3).view(n, 3)])
simple("prod.dim_int", lambda a: aten.prod.dim_int(a, 1))
simple("prod.default", lambda a: aten.prod.default(a))
simple("prod.default_int", lambda a: aten.prod.default(a), lambda n: [torch.randint(-2, 3, (n, 3))])
simple("any.dim", lambda a: aten.any.dim(a, 1), lambda n: [_b(n, 3)])
simple("all.default", lambda a: aten.all.default(a), lambda n: [_b(n, 3)])
simple("any.default_float", lambda a: aten.any.default(a), lambda n: [_i(n, 3, high=2).float()])
simple("any.dims", lambda a: aten.any.dims(a, [1], True), lambda n: [_b(n, 3)])
simple("all.dim_int", lambda a: aten.all.dim(a, 0, True), lambda n: [_i(n, 3, high=2)])
simple("all.dims", lambda a: aten.all.dims(a, [0, 1]), lambda n: [_b(n, 3)])
simple("any.dims_empty", lambda a: aten.any.dims(a, []), lambda n: [_b(n, 3)])  # an empty list reduces nothing
simple("all.dims_empty_keepdim", lambda a: aten.all.dims(a, [], True), lambda n: [_r(n, 3)])
simple("var.correction", lambda a: aten.var.correction(a, [1], correction=1))
simple("var.correction_all", lambda a: aten.var.correction(a, None, correction=0, keepdim=True))
simple("var_mean.correction", lambda a: aten.var_mean.correction(a, [0], correction=1))
simple("std.correction", lambda a: aten.std.correction(a, [1]))
simple("argmax", lambda a: aten.argmax.default(a, 1))
simple("argmax_all", lambda a: aten.argmax.default(a))
simple("argmin", lambda a: aten.argmin.default(a, 0, True))
simple("cumsum", lambda a: aten.cumsum.default(a, 0))
simple("cumsum_int", lambda a: aten.cumsum.default(a, 1), lambda n: [_i(n, 3)])
simple("topk", lambda a: aten.topk.default(a, 2, 0), lambda n: [torch.randperm(n * 3).float().view(n, 3)])
simple("logsumexp", lambda a: aten.logsumexp.default(a, [1]))
simple("linalg_vector_norm", lambda a: aten.linalg_vector_norm.default(a, 2, [1]))

# -- views and indexing --------------------------------------------------------------------------------------------
simple("view", lambda a: aten.view.default(a, [-1]))
simple("view_sym", lambda a: aten.view.default(a, [a.shape[0], 3, 1]))
simple("_unsafe_view", lambda a: aten._unsafe_view.default(a, [3, a.shape[0]]))
simple("reshape", lambda a: aten.reshape.default(a, [a.shape[0] * 3]))
simple("expand", lambda a: aten.expand.default(a, [2, -1, 3]), lambda n: [_r(n, 1)])
simple("expand_sym", lambda a, b: aten.expand.default(a, [b.shape[0], 3]), lambda n: [_r(1, 3), _r(n, 3)])
simple("permute", lambda a: aten.permute.default(a, [2, 0, 1]), lambda n: [_r(n, 3, 2)])
simple("transpose.int", lambda a: aten.transpose.int(a, 0, -1), lambda n: [_r(n, 3, 2)])
simple("t", lambda a: aten.t.default(a))
simple("squeeze.dim", lambda a: aten.squeeze.dim(a, 1), lambda n: [_r(n, 1, 3)])
simple("squeeze.dims", lambda a: aten.squeeze.dims(a, [0, 1]), lambda n: [_r(n, 1, 3)])
simple("squeeze.default", lambda a: aten.squeeze.default(a), lambda n: [_r(1, n, 1)])
simple("unsqueeze", lambda a: aten.unsqueeze.default(a, -1))
simple("slice.Tensor", lambda a: aten.slice.Tensor(a, 0, 1, -1))
simple("slice.Tensor_step", lambda a: aten.slice.Tensor(a, 1, 0, 3, 2))
simple("narrow", lambda a: aten.narrow.default(a, 0, 1, 2))
simple("select.int", lambda a: aten.select.int(a, 1, -1))
simple("slice_scatter", lambda a, b: aten.slice_scatter.default(a, b, 1, 1, 3), lambda n: [_r(n, 4), _r(n, 2)])
simple("slice_scatter_step", lambda a, b: aten.slice_scatter.default(a, b, 1, 1, 6, 2), lambda n: [_r(n, 6), _r(n, 3)])
simple("new_empty_strided", lambda a: aten.fill.Scalar(aten.new_empty_strided.default(a, [2, 3], [3, 1]), 2.0) + a[0],
       lambda n: [_r(n, 3)])
simple("select_scatter", lambda a, b: aten.select_scatter.default(a, b, 1, 0), lambda n: [_r(n, 3), _r(n)])
simple("cat", lambda a, b: aten.cat.default([a, b], 1), x2)
simple("cat_promote", lambda a, b: aten.cat.default([a, b]), lambda n: [_r(n, 3), _i(2, 3)])
simple("cat_legacy_empty", lambda a, e: aten.cat.default([e, a], 1), lambda n: [_r(n, 3), torch.zeros(0)])
simple("stack", lambda a, b: aten.stack.default([a, b], 1), x2)
simple("split.Tensor", lambda a: aten.split.Tensor(a, 2, 1), lambda n: [_r(n, 5)])
simple("split_with_sizes", lambda a: aten.split_with_sizes.default(a, [1, 2], 1))
simple("unbind", lambda a: aten.unbind.int(a, 1))
simple("index_select", lambda a, i: aten.index_select.default(a, 0, i), lambda n: [_r(n, 3), torch.tensor([0, 1, 1])])
simple("gather", lambda a, i: aten.gather.default(a, 1, i), lambda n: [_r(n, 3), torch.randint(0, 3, (n, 2))])
simple("scatter.src", lambda a, i, s: aten.scatter.src(a, 1, i, s),
       lambda n: [_r(n, 3), torch.stack([torch.randperm(3)[:2] for _ in range(n)]), _r(n, 3)])
simple("scatter.value", lambda a, i: aten.scatter.value(a, 1, i, 5.0),
       lambda n: [_r(n, 3), torch.randint(0, 3, (n, 1))])
simple("scatter_add", lambda a, i, s: aten.scatter_add.default(a, 1, i, s),
       lambda n: [_r(n, 3), torch.randint(0, 3, (n, 4)), _r(n, 4)])
simple("index.Tensor", lambda a, i: aten.index.Tensor(a, [None, i]), lambda n: [_r(n, 3), torch.tensor([[2, 0]])])
simple("index.Tensor_leading", lambda a, i, j: aten.index.Tensor(a, [i, j]),
       lambda n: [_r(n, 3, 2), torch.arange(n).view(n, 1, 1), torch.tensor([[2, -1, 0]]).view(1, 1, 3)])
simple("index_put_acc", lambda a, i, v: aten.index_put.default(a, [i], v, True),
       lambda n: [_r(n, 3), torch.tensor([0, 1, 0]), _r(3, 3)])
simple("index_put_dim1", lambda a, i, v: aten.index_put.default(a, [None, i], v),
       lambda n: [_r(n, 5), torch.tensor([4, 1]), _r(n, 2)])
simple("index_put_dim1_acc", lambda a, i, v: aten.index_put.default(a, [None, i], v, True),
       lambda n: [_r(2, 5, n), torch.tensor([0, 3, 0]), _r(n)])
simple("constant_pad_nd", lambda a: aten.constant_pad_nd.default(a, [1, 2, 0, 1], 0.5))
simple("flip", lambda a: aten.flip.default(a, [0, 1]))
simple("repeat", lambda a: aten.repeat.default(a, [2, 1, 2]))
simple("roll", lambda a: aten.roll.default(a, [1], [0]))
simple("slice_backward", lambda g: aten.slice_backward.default(g, [g.shape[0], 5], 1, 1, 4, 1))
simple("select_backward", lambda g: aten.select_backward.default(g, [g.shape[0], 4], 1, 2), lambda n: [_r(n)])
simple("embedding", lambda w, i: aten.embedding.default(w, i), lambda n: [_r(10, n), torch.randint(0, 10, (n, 2))])
simple("embedding_dense_backward", lambda g, i: aten.embedding_dense_backward.default(g, i, 10, 1, False),
       lambda n: [_r(n, 2, 3), torch.randint(0, 10, (n, 2))])

# -- matmul, softmax, normalization, losses ------------------------------------------------------------------------
simple("mm", lambda a, b: aten.mm.default(a, b), lambda n: [_r(n, 3), _r(3, 5)])
simple("bmm", lambda a, b: aten.bmm.default(a, b), lambda n: [_r(2, n, 3), _r(2, 3, n)])
simple("addmm", lambda c, a, b: aten.addmm.default(c, a, b, beta=0.5, alpha=2.0),
       lambda n: [_r(5), _r(n, 3), _r(3, 5)])
simple("matmul", lambda a, b: aten.matmul.default(a, b), lambda n: [_r(2, n, 3), _r(3, 4)])
simple("baddbmm", lambda c, a, b: aten.baddbmm.default(c, a, b), lambda n: [_r(2, n, n), _r(2, n, 3), _r(2, 3, n)])
simple("_softmax", lambda a: aten._softmax.default(a, -1, False))
simple("_log_softmax", lambda a: aten._log_softmax.default(a, 0, False))


def _masked_rows(n: int) -> list[torch.Tensor]:
    scores = _r(n, 4)
    scores[0] = float("-inf")  # a fully masked row: zeros, not NaN
    scores[1, :2] = float("-inf")
    return [scores]


simple("_safe_softmax", lambda a: aten._safe_softmax.default(a, -1), _masked_rows)
simple("_softmax_backward_data", lambda g, y: aten._softmax_backward_data.default(g, y.softmax(1), 1, torch.float32),
       x2)
simple("_log_softmax_backward_data",
       lambda g, y: aten._log_softmax_backward_data.default(g, y.log_softmax(1), 1, torch.float32), x2)
simple("native_layer_norm", lambda a, w, b: aten.native_layer_norm.default(a, [3], w, b, 1e-5),
       lambda n: [_r(n, 2, 3), _r(3), _r(3)])
simple("native_layer_norm_float64", lambda a, w, b: aten.native_layer_norm.default(a, [3], w, b, 1e-5),
       lambda n: [_r(n, 2, 3).double(), _r(3).double(), _r(3).double()])
simple("_softmax_float64", lambda a: aten._softmax.default(a, -1, False), lambda n: [_r(n, 3).double()])
simple("mm_float64", lambda a, b: aten.mm.default(a, b), lambda n: [_r(n, 3).double(), _r(3, 5).double()])
simple("native_layer_norm_noaffine", lambda a: aten.native_layer_norm.default(a, [2, 3], None, None, 1e-5),
       lambda n: [_r(n, 2, 3)])
simple("native_layer_norm_backward",
       lambda g, a, w, b: aten.native_layer_norm_backward.default(
           g, a, [3], *aten.native_layer_norm.default(a, [3], w, b, 1e-5)[1:], w, b, [True, True, True]),
       lambda n: [_r(n, 3), _r(n, 3), _r(3), _r(3)])


def _bn_inputs(n: int) -> list[torch.Tensor]:
    return [_r(n, 3, 4, 4), _r(3), _r(3), _r(3), _pos(3)]


simple("_native_batch_norm_legit_functional",
       lambda x, w, b, rm, rv: aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, True, 0.1, 1e-5),
       _bn_inputs)
simple("_native_batch_norm_legit_no_training",
       lambda x, w, b, rm, rv: aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)[0],
       _bn_inputs)
simple("native_batch_norm_eval",
       lambda x, w, b, rm, rv: aten.native_batch_norm.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0], _bn_inputs)
simple("_native_batch_norm_legit.no_stats",
       lambda x, w, b, rm, rv: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), _bn_inputs)
simple("_native_batch_norm_legit_eval",
       lambda x, w, b, rm, rv: aten._native_batch_norm_legit.default(x, w, b, rm, rv, False, 0.1, 1e-5), _bn_inputs)
simple("native_batch_norm_backward",
       lambda g, x, w, b, rm, rv: aten.native_batch_norm_backward.default(
           g, x, w, rm, rv, *aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)[1:], True, 1e-5,
           [True, True, True]),
       lambda n: [_r(n, 3, 4, 4), *_bn_inputs(n)])


def _nll_inputs(n: int) -> list[torch.Tensor]:
    target = torch.randint(0, 5, (n,))
    target[0] = -100
    return [torch.randn(n, 5).log_softmax(1), target, _pos(5)]


simple("nll_loss_forward_mean",
       lambda x, t, w: aten.nll_loss_forward.default(x, t, w, 1, -100), _nll_inputs)
simple("nll_loss_forward_sum", lambda x, t, w: aten.nll_loss_forward.default(x, t, None, 2, -100), _nll_inputs)
simple("nll_loss_forward_none", lambda x, t, w: aten.nll_loss_forward.default(x, t, w, 0, -100)[0], _nll_inputs)
simple("nll_loss_backward",
       lambda x, t, w: aten.nll_loss_backward.default(torch.ones(()), x, t, w, 1, -100,
                                                      aten.nll_loss_forward.default(x, t, w, 1, -100)[1]),
       _nll_inputs)
simple("mse_loss", lambda a, b: aten.mse_loss.default(a, b, 1), x2)

# -- convolution and pooling ---------------------------------------------------------------------------------------


def _conv_inputs(n: int) -> list[torch.Tensor]:
    return [_r(2, 4, n + 4, n + 4), _r(6, 2, 3, 3), _r(6)]  # stride 2 leaves the last row out


simple("convolution", lambda x, w, b: aten.convolution.default(x, w, b, [2, 1], [1, 0], [1, 1], False, [0, 0], 2),
       _conv_inputs)
simple("convolution_transposed",
       lambda x, w: aten.convolution.default(x, w, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
       lambda n: [_r(2, 4, n + 3, n + 3), _r(4, 3, 3, 3)])
simple("convolution_backward",
       lambda x, w, b: aten.convolution_backward.default(
           aten.convolution.default(x, w, b, [2, 1], [1, 0], [1, 1], False, [0, 0], 2).cos(), x, w, [6], [2, 1],
           [1, 0], [1, 1], False, [0, 0], 2, [True, True, True]), _conv_inputs)
simple("max_pool2d_with_indices", lambda x: aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1]),
       lambda n: [_r(2, 3, n + 4, n + 4)])
simple("max_pool2d_with_indices_backward",
       lambda g, x: aten.max_pool2d_with_indices_backward.default(
           g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, aten.max_pool2d_with_indices.default(x, [2, 2], [2, 2])[1]),
       lambda n: [_r(2, 3, n, n), _r(2, 3, 2 * n, 2 * n)])
simple("avg_pool2d", lambda x: aten.avg_pool2d.default(x, [2, 2], [2, 2], [1, 1], False, False),
       lambda n: [_r(2, 3, n + 2, n + 2)])
simple("avg_pool2d_backward",
       lambda g, x: aten.avg_pool2d_backward.default(g, x, [3, 3], [2, 2], [1, 1], False, False, None),
       lambda n: [_r(2, 3, n, n), _r(2, 3, 2 * n, 2 * n)])
simple("avg_pool2d_backward_include_pad",
       lambda g, x: aten.avg_pool2d_backward.default(g, x, [2, 2], [], [0, 0], False, True, None),
       lambda n: [_r(2, 3, n, n), _r(2, 3, 2 * n + 1, 2 * n + 1)])
simple("_adaptive_avg_pool2d", lambda x: aten._adaptive_avg_pool2d.default(x, [1, 1]), lambda n: [_r(2, 3, n, n)])
simple("_adaptive_avg_pool2d_backward",
       lambda g, x: aten._adaptive_avg_pool2d_backward.default(g, x), lambda n: [_r(2, 3, 2, 3), _r(2, 3, n, 7)])

# -- attention -----------------------------------------------------------------------------------------------------
simple("_scaled_dot_product_flash_attention_for_cpu_causal",
       lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True),
       lambda n: [_r(1, 2, n, 8), _r(1, 2, n, 8), _r(1, 2, n, 8)])
simple("_scaled_dot_product_flash_attention_for_cpu_mask_scale",
       lambda q, k, v, m: aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, False, attn_mask=m,
                                                                                   scale=0.3),
       lambda n: [_r(2, 2, n, 8), _r(2, 2, n + 1, 8), _r(2, 2, n + 1, 8), _r(1, 1, n, n + 1)])


def _sdpa_backward(g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, False, scale=0.5)
    return aten._scaled_dot_product_flash_attention_for_cpu_backward.default(g, q, k, v, out, lse, 0.0, False,
                                                                             scale=0.5)


simple("_scaled_dot_product_flash_attention_for_cpu_backward", _sdpa_backward,
       lambda n: [_r(1, 2, n, 8), _r(1, 2, n, 8), _r(1, 2, n + 2, 8), _r(1, 2, n + 2, 8)])

# -- complex values (float pairs in a trailing dimension inside the graph) -----------------------------------------


def _c(*shape: int, dtype: torch.dtype = torch.complex64) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


def _rope(xq: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Meta-Llama rotary embedding, with ``freqs_cis`` made by ``polar`` inside the graph."""
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)


def _rope_backward(g: torch.Tensor, xq_c: torch.Tensor, freqs_cis: torch.Tensor) -> Any:
    """The operators of the rotary embedding's AOT backward graph: gradients through conjugates."""
    g_c = aten.view_as_complex.default(aten.view.default(g, [*g.shape[:-1], -1, 2]))
    grad_x = aten.mul.Tensor(g_c, aten.clone.default(aten._conj.default(freqs_cis)))
    grad_f = aten.sum.dim_IntList(aten.mul.Tensor(g_c, aten.clone.default(aten._conj.default(xq_c))), [0, 2], True)
    grad_f = aten.view.default(grad_f, [grad_f.shape[1], grad_f.shape[3]])
    grad_angle = aten.mul.Tensor(aten.clone.default(aten._conj.default(grad_f)),
                                 aten.mul.Scalar(aten.view.default(freqs_cis, [grad_f.shape[0], -1]), 1j))
    return (aten.view.default(aten.view_as_real.default(grad_x), g.shape),
            aten.select.int(aten.view_as_real.default(grad_angle), 2, 0))


simple("view_as_complex", lambda x: aten.view_as_complex.default(x), lambda n: [_r(n, 3, 2)])
simple("view_as_complex_f64", lambda x: aten.view_as_complex.default(x), lambda n: [_r(n, 3, 2).double()])
simple("view_as_real", lambda c: aten.view_as_real.default(c), lambda n: [_c(n, 3)])
simple("view_as_real_of_view_as_complex", lambda x: aten.view_as_real.default(aten.view_as_complex.default(x)) * 2,
       lambda n: [_r(n, 3, 2)])
simple("mul.Tensor_complex", lambda a, b: aten.mul.Tensor(a, b), lambda n: [_c(2, n, 3), _c(n, 3)])
simple("mul.Tensor_complex128", lambda a, b: aten.mul.Tensor(a, b),
       lambda n: [_c(n, 3, dtype=torch.complex128), _c(n, 3)])
simple("mul.Tensor_complex_real", lambda a, b: aten.mul.Tensor(a, b), lambda n: [_c(n, 3), _r(3)])
simple("mul.Tensor_real_complex", lambda a, b: aten.mul.Tensor(a, b), lambda n: [_r(n, 1), _c(n, 3)])
simple("mul.Scalar_complex_by_1j", lambda c: aten.mul.Scalar(c, 1j), lambda n: [_c(n, 3)])
simple("mul.Scalar_complex_by_real", lambda c: aten.mul.Scalar(c, -2.5), lambda n: [_c(n, 3)])
simple("mul.Scalar_real_by_complex", lambda x: aten.mul.Scalar(x, 0.5 - 2j), lambda n: [_r(n, 3)])
simple("polar", lambda r, t: aten.polar.default(r, t), lambda n: [_pos(n, 3), _r(n, 3)])
simple("polar_f64", lambda r, t: aten.polar.default(r, t), lambda n: [_pos(n, 3).double(), _r(n, 3).double()])
simple("add.Tensor_complex", lambda a, b: aten.add.Tensor(a, b, alpha=2), lambda n: [_c(n, 3), _c(1, 3)])
simple("add.Tensor_complex_real", lambda a, b: aten.add.Tensor(a, b), lambda n: [_c(n, 3), _r(n, 3)])
simple("sub.Tensor_real_complex", lambda a, b: aten.sub.Tensor(a, b), lambda n: [_r(n, 3), _c(n, 3)])
simple("add.Scalar_complex", lambda c: aten.add.Scalar(c, 1 + 2j), lambda n: [_c(n, 3)])
simple("neg_complex", lambda c: aten.neg.default(c), lambda n: [_c(n, 3)])
simple("_conj_clone", lambda c: aten.clone.default(aten._conj.default(c)), lambda n: [_c(n, 3)])
simple("conj_physical", lambda c: aten.conj_physical.default(c), lambda n: [_c(n, 3)])
simple("detach_complex", lambda c: aten.detach.default(c), lambda n: [_c(n, 3)])
simple("_to_copy_complex128", lambda c: aten._to_copy.default(c, dtype=torch.complex128), lambda n: [_c(n, 3)])
simple("_to_copy_real_to_complex", lambda x: aten._to_copy.default(x, dtype=torch.complex64), lambda n: [_r(n, 3)])
simple("sum.dim_IntList_complex", lambda c: aten.sum.dim_IntList(c, [0, -1], True), lambda n: [_c(n, 2, 3)])
simple("sum.default_complex", lambda c: aten.sum.default(c), lambda n: [_c(n, 3)])
simple("view_complex", lambda c: aten.view.default(c, [-1, c.shape[0]]), lambda n: [_c(n, 2, 3)])
simple("_unsafe_view_complex", lambda c: aten._unsafe_view.default(c, [c.shape[0] * 2, 3]), lambda n: [_c(n, 2, 3)])
simple("expand_complex", lambda c: aten.expand.default(c, [2, -1, 3]), lambda n: [_c(n, 1)])
simple("permute_complex", lambda c: aten.permute.default(c, [-1, 0, 1]), lambda n: [_c(n, 2, 3)])
simple("transpose_complex", lambda c: aten.transpose.int(c, -1, 0), lambda n: [_c(n, 2, 3)])
simple("t_complex", lambda c: aten.t.default(c), lambda n: [_c(n, 3)])
simple("unsqueeze_complex", lambda c: aten.unsqueeze.default(c, -1), lambda n: [_c(n, 3)])
simple("squeeze_complex", lambda c: aten.squeeze.dims(c, [1, -1]), lambda n: [_c(n, 1, 3, 1)])
simple("slice_complex", lambda c: aten.slice.Tensor(c, -1, 1, None, 2), lambda n: [_c(n, 5)])
simple("select_complex", lambda c: aten.select.int(c, -2, 1), lambda n: [_c(n, 3, 2)])
simple("cat_complex", lambda a, b: aten.cat.default([a, b], -1), lambda n: [_c(n, 3), _c(n, 2)])
simple("cat_complex_real", lambda a, b: aten.cat.default([a, b], 0), lambda n: [_c(n, 3), _r(2, 3)])
simple("stack_complex", lambda a, b: aten.stack.default([a, b], -1), lambda n: [_c(n, 3), _c(n, 3)])
simple("rope_meta_llama", _rope, lambda n: [_r(2, n, 3, 8), _r(n, 4)])
simple("rope_meta_llama_backward", _rope_backward,
       lambda n: [_r(2, n, 3, 8), _c(2, n, 3, 4), aten.polar.default(torch.ones(1, n, 1, 4), _r(1, n, 1, 4))])
