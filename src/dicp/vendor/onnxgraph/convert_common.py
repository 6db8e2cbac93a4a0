"""What every converter module of the ``onnxgraph`` vendor imports: the conversion table and its helpers.

The contract a converter follows is in :mod:`dicp.vendor.onnxgraph.conversion`, which also loads every converter
module (``convert_*``, ``fused``'s through ``convert_dlinfer``) into the table; the converter modules import this one,
never that one, so that no import goes in a circle.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from dicp.dynamo_bridge.conversion import ConversionRegistry, Target, _expand

from .codegen import _ONNX_DTYPES, COMPLEX_PARTS, ConversionContext

__all__ = ["INT64_MAX", "INT64_MIN", "aten", "common_dtype", "conversions", "dtype_supported", "is_complex_node",
           "no_float64", "norm_dim", "operand", "out_dtype", "prims", "register", "register_complex",
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


def dtype_supported(node: torch.fx.Node, *, complex_ok: bool = False) -> str | None:
    """None when every tensor the node reads or makes has a dtype the ONNX graph handles, else the reason.
    ``complex_ok``: complex dtypes count as handled (float pairs, for the converters of ``register_complex``)."""
    for val in _vals(node):
        if (isinstance(val, torch.Tensor) and val.dtype not in _ONNX_DTYPES
                and not (complex_ok and val.dtype in COMPLEX_PARTS)):
            return f"dtype {val.dtype} not supported by onnxgraph"
    return None


def is_complex_node(node: torch.fx.Node) -> bool:
    """Whether the node reads or makes a complex tensor."""
    return any(isinstance(v, torch.Tensor) and v.is_complex() for v in _vals(node))


def _dispatch(real_fn: Callable[..., Any] | None, complex_fn: Callable[..., Any], ctx: ConversionContext,
              *args: Any, **kwargs: Any) -> Any:
    if is_complex_node(ctx.node) or real_fn is None:
        return complex_fn(ctx, *args, **kwargs)
    return real_fn(ctx, *args, **kwargs)


def _dispatch_supports(real_supports: Callable[[torch.fx.Node], str | None] | None, has_real: bool,
                       complex_supports: Callable[[torch.fx.Node], str | None] | None, node: torch.fx.Node
                       ) -> str | None:
    complex_node = is_complex_node(node)
    if not complex_node and has_real:
        return real_supports(node) if real_supports is not None else None
    # a complex node, or a complex-only operator (view_as_real, polar, _conj) on real values: its real forms
    reason = dtype_supported(node, complex_ok=complex_node)
    return reason or (complex_supports(node) if complex_supports is not None else None)


def register_complex(targets: Target | Iterable[Target], supports: Callable[[torch.fx.Node], str | None] | None = None
                     ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn`` converts the nodes of ``targets`` that read or make complex tensors (a complex value is
    float pairs in a trailing dimension, see :mod:`dicp.vendor.onnxgraph.codegen`); the other nodes keep the
    converter registered before (an operator with none, e.g. ``view_as_real``, goes to ``fn`` for every node).
    ``supports`` rejects forms ``fn`` does not handle; complex dtypes are accepted only through this."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for target in _expand(targets):
            base = conversions.lookup(target)
            real_fn = base.fn if base is not None else None
            check = functools.partial(_dispatch_supports, base.supports if base is not None else None,
                                      base is not None, supports)
            conversions.register(target, supports=check)(functools.partial(_dispatch, real_fn, fn))
        return fn

    return decorate


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


#: ``operand(ctx, x, dtype)``: a tensor name or a Python scalar as a value of ``dtype`` (``ctx.scalar``)
operand = ConversionContext.scalar


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
