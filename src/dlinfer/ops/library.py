"""One ``torch.library`` registration per dlinfer operator, serving op mode and graph mode alike.

:func:`define` declares ``dlinfer::<name>`` with its schema and a fake (meta) implementation, and registers one
kernel that asks :data:`dlinfer.registry.registry` for the kernel of the tensors' device:

- ``CompositeExplicitAutograd``: every backend whose tensors reach the backend keys (cpu, cuda, ...);
- ``PrivateUse1``: the out-of-tree device's own key. A Python device (torch_dipu's ``dipu``) wraps its tensors in
  a ``__torch_dispatch__`` subclass, which sees the call before the backend keys; torch_dipu runs an operator's
  PrivateUse1 kernel with the device's tensors as they are (torch_dipu.device_kernels), so they reach the
  registry as they are, with or without ``torch.inference_mode()``;
- ``AutogradPrivateUse1``: with autograd on, the same kernel one key earlier, so the call records no autograd
  node. Under tracing (fake or functional tensors) it steps below autograd, so the fake implementation answers
  and the op stays one node.

``torch.compile`` captures each operator as a single graph node (the fake implementation gives its output
metadata); a dispatch-level trace (``TorchDispatchMode``) sees every dlinfer operator that runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake

from dlinfer.registry import device_type_of, registry

__all__ = ["NAMESPACE", "call", "define", "defined_ops"]

NAMESPACE = "dlinfer"
_LIB = torch.library.Library(NAMESPACE, "DEF")
_DEFINED: list[str] = []


def _traced(args: tuple) -> bool:
    for a in args:
        items = a if isinstance(a, (list, tuple)) else (a,)
        for t in items:
            if isinstance(t, torch.Tensor) and (is_fake(t) or torch._is_functional_tensor(t)):
                return True
    return False


def _binder(schema: torch._C.FunctionSchema) -> Callable[[tuple, dict], tuple]:
    """``(args, kwargs) -> every argument positionally``, defaults filled in (the dispatcher drops arguments equal
    to their default), so kernels and fakes always see the whole signature."""
    params = [(a.name, a.default_value, a.has_default_value()) for a in schema.arguments]
    first_default = len(params)
    while first_default and params[first_default - 1][2]:
        first_default -= 1
    defaults = tuple(p[1] for p in params)

    def bind(args: tuple, kwargs: dict) -> tuple:
        if not kwargs:
            if len(args) == len(params):
                return args
            if len(args) >= first_default:  # the dispatcher dropped trailing arguments equal to their default
                return args + defaults[len(args):]
        out = list(args)
        for pname, default, has_default in params[len(args):]:
            if pname in kwargs:
                out.append(kwargs[pname])
            elif has_default:
                out.append(default)
            else:
                raise TypeError(f"dlinfer::{schema.name}: missing argument {pname!r}")
        return tuple(out)

    return bind


def define(name: str, schema: str, fake: Callable[..., Any]) -> torch._ops.OpOverloadPacket:
    """Declare ``dlinfer::name`` with ``schema`` (the argument list and returns, e.g.
    ``"(Tensor x, float eps) -> Tensor"``) and its fake implementation; return ``torch.ops.dlinfer.name``.
    Kernels and the fake always receive every argument positionally (defaults filled in)."""
    _LIB.define(f"{name}{schema}")
    packet = getattr(torch.ops.dlinfer, name)
    bind = _binder(packet.default._schema)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        full = bind(args, kwargs)
        return registry.dispatch(name, device_type_of(*full), *full)

    def autograd_kernel(*args: Any, **kwargs: Any) -> Any:
        if _traced(args):
            with torch._C._AutoDispatchBelowAutograd():
                return packet.default(*args, **kwargs)
        return kernel(*args, **kwargs)

    def fake_kernel(*args: Any, **kwargs: Any) -> Any:
        return fake(*bind(args, kwargs))

    _LIB.impl(name, kernel, "CompositeExplicitAutograd")
    _LIB.impl(name, kernel, "PrivateUse1")
    _LIB.impl(name, autograd_kernel, "AutogradPrivateUse1")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake_kernel, lib=_LIB)
    _DEFINED.append(name)
    return packet


def defined_ops() -> list[str]:
    """The names of every defined dlinfer operator, in definition order."""
    return list(_DEFINED)


_grad_enabled = torch.is_grad_enabled
_function_mode_enabled = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_compiling = torch.compiler.is_compiling


def call(packet: torch._ops.OpOverloadPacket, *args: Any) -> Any:
    """Op mode's call of ``packet`` with every argument positionally. In eager inference (autograd off, no
    ``torch.compile`` tracing, no Python dispatch or function mode watching: op_tools, a dispatch trace, fake
    tensors) the kernel registry directly, since the dispatcher would only route the call to the same kernel at
    about 10 us a call; otherwise the operator through the dispatcher (autograd, tracing and modes see it)."""
    if _compiling() or _grad_enabled() or _function_mode_enabled() or _dispatch_modes():  # compiling first: dynamo
        return packet.default(*args)                                                       # folds the rest away
    first = args[0]
    device_type = first.device.type if isinstance(first, torch.Tensor) else device_type_of(*args)
    return registry.dispatch(packet.__name__, device_type, *args)
