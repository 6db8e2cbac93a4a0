"""ATen -> ONNX conversions of the ``onnxgraph`` vendor: the registry and the converter contract.

Registry::

    from dicp.vendor.onnxgraph.conversion import register_conversion

    @register_conversion(torch.ops.aten.rsqrt.default)
    def rsqrt(ctx, x):
        return ctx.emit("Reciprocal", [ctx.emit("Sqrt", [x])])

Contract (what codegen, :mod:`dicp.vendor.onnxgraph.codegen`, does with a converter):

- A converter is called as ``fn(ctx, *args, **kwargs)`` with the fx node's arguments, where every ``fx.Node`` is
  replaced by the name (a ``str``) of its ONNX value, a node producing a tuple (``native_layer_norm``) by the list
  of its names (``operator.getitem`` picks one); constants stay Python values (ints, floats, bools, dtypes,
  lists, None). A symbolic size (SymInt) arrives as the name of a 0-d int64 ONNX value.
- It returns the name of its result, or a list of names for an operator with several results.
- ``ctx`` (:class:`~dicp.vendor.onnxgraph.codegen.ConversionContext`) offers:

  - ``ctx.node``: the fx node (``ctx.node.meta["val"]`` its fake result; ``ctx.out`` is the same);
    ``ctx.opset``: the ONNX opset (18);
  - ``ctx.emit(op_type, inputs, outputs=1, *, domain="", dtype=None, **attrs) -> name | list[name]``: append an
    ONNX node (``None`` for an omitted optional input; ``dtype`` records the outputs' dtype);
  - ``ctx.const(value, dtype) -> name``: an initializer; ``ctx.scalar(value_or_name, dtype)``: a 0-d value;
  - ``ctx.cast(name, dtype) -> name``: no node when already that dtype;
  - ``ctx.shape_of(name, start=None, end=None) -> name``: the run-time shape (1-D int64);
  - ``ctx.sizes([int | name, ...]) -> name``: a 1-D int64 tensor from ints and SymInt names (view/expand sizes);
  - ``ctx.dtype_of(name)`` (dtype inside the graph: float16/bfloat16 values are float32),
    ``ctx.torch_dtype_of(name)``, ``ctx.rank_of(name)``, ``ctx.static_shape(name)`` (None if symbolic),
    ``ctx.val_of(name)`` (the fake value, when known).

- A converter never calls ``int()``, ``bool()`` or comparisons on a SymInt (that adds guards): a symbolic size is
  an ONNX value, or is read from a shape at run time. Ranks are static; ``type(d) is int`` tells a static size.
- float16/bfloat16 tensors are float32 inside the graph (codegen casts at the inputs and outputs); converters
  compute in ``compute_dtype(meta dtype)``, i.e. use ``ctx.cast(x, out_dtype)`` and ``ctx.const(v, out_dtype)``.
- ``supports=`` (a ``node -> reason | None`` function) rejects forms a converter does not handle, so that node
  runs in an eager island; :func:`dtype_supported` rejects dtypes ONNX Runtime lacks.
- Random operators (dropout, rand*, bernoulli) are never converted: they stay eager and keep torch's RNG.

The converters live in ``convert_math`` (elementwise, reductions, creation), ``convert_shape`` (views,
indexing) and ``convert_nn`` (matmul, normalization, losses, convolution, pooling); ``fused`` adds the fused
operators of the pattern rewrites.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from dicp.dynamo_bridge.conversion import ConversionRegistry, Target

from .codegen import _ONNX_DTYPES, ConversionContext

__all__ = ["INT64_MAX", "INT64_MIN", "conversions", "dtype_supported", "no_float64", "norm_dim", "register",
           "register_conversion"]

conversions = ConversionRegistry("onnxgraph")
register_conversion = conversions.register

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

aten = torch.ops.aten
prims = torch.ops.prims


def _vals(node: torch.fx.Node) -> list[Any]:
    vals: list[Any] = []

    def add(a: Any) -> Any:
        vals.append(a.meta.get("val"))
        return a

    torch.fx.node.map_arg((node.args, node.kwargs), add)
    out = node.meta.get("val")
    vals.extend(out if isinstance(out, (list, tuple)) else [out])
    return vals


def dtype_supported(node: torch.fx.Node) -> str | None:
    """None when every tensor the node reads or makes has a dtype the ONNX graph handles, else the reason."""
    for val in _vals(node):
        if isinstance(val, torch.Tensor) and val.dtype not in _ONNX_DTYPES:
            return f"dtype {val.dtype} not supported by onnxgraph"
    return None


def register(targets: Target | Iterable[Target], supports: Callable[[torch.fx.Node], str | None] | None = None
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """:data:`register_conversion` with :func:`dtype_supported` checked before ``supports``."""

    def check(node: torch.fx.Node) -> str | None:
        return dtype_supported(node) or (supports(node) if supports is not None else None)

    return conversions.register(targets, supports=check)


def no_float64(op_type: str) -> Callable[[torch.fx.Node], str | None]:
    """A ``supports=`` check rejecting float64 for an ONNX op ONNX Runtime's CPU provider has no double kernel of."""

    def check(node: torch.fx.Node) -> str | None:
        if any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for v in _vals(node)):
            return f"float64 (ONNX Runtime's CPU provider has no double {op_type} kernel)"
        return None

    return check


def norm_dim(dim: int, rank: int) -> int:
    """``dim`` made non-negative for a tensor of ``rank`` (a 0-d tensor accepts 0 and -1)."""
    return dim % rank if rank else 0


def out_dtype(ctx: ConversionContext) -> torch.dtype:
    """The dtype of the node's (first) result."""
    val = ctx.out
    if isinstance(val, (list, tuple)):
        val = val[0]
    return val.dtype


def operand(ctx: ConversionContext, x: Any, dtype: torch.dtype) -> str:
    """A tensor name or a Python scalar as a value of ``dtype``."""
    return ctx.cast(x, dtype) if isinstance(x, str) else ctx.const(x, dtype)


def _proxy(ctx: ConversionContext, x: Any) -> Any:
    if not isinstance(x, str):
        return x
    val = ctx.val_of(x)
    if isinstance(val, torch.Tensor):
        return torch.empty((1,) * min(val.dim(), 1), dtype=val.dtype)
    return 0


def common_dtype(ctx: ConversionContext, *xs: Any) -> torch.dtype:
    """torch's type promotion of tensor names and Python scalars (as eager computes comparisons)."""
    with unset_fake_temporarily():  # codegen may run under the bridge's fake mode: these are real, tiny tensors
        proxies = [_proxy(ctx, x) for x in xs]
        dtype = torch.result_type(proxies[0], proxies[1]) if len(proxies) > 1 else (
            proxies[0].dtype if isinstance(proxies[0], torch.Tensor) else torch.float32)
        for p in proxies[2:]:
            dtype = torch.result_type(torch.empty((1,), dtype=dtype), p)
    return dtype


def _load() -> None:
    # they register their converters (convert_dlinfer: dlinfer's LLM operators, docs/dlinfer.md "Graph mode")
    from . import convert_attention, convert_dlinfer, convert_math, convert_nn, convert_shape  # noqa: F401


_load()
