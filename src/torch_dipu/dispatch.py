"""ATen -> DIOPI dispatch: the per-operator handlers behind ``DipuTensor.__torch_dispatch__``.

A handler is built once per ATen overload and cached. It unwraps dipu tensors to storage tensors,
runs the selected kernel (see :mod:`torch_dipu.kernels`) and wraps the results. In-place and ``out=``
overloads return the caller's tensors; view overloads return new dipu tensors aliasing the input's
storage. This is the product's hot loop: keep per-call work minimal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_dipu import kernels
from torch_dipu.state import get_state
from torch_dipu.tensor import _HANDLERS, DipuTensor

Handler = Callable[[tuple, dict | None], Any]
_CPU = torch.device("cpu")
_Tensor = torch.Tensor


def clear_handlers() -> None:
    """Forget every built handler (after the fallback list or vendor switches change)."""
    _HANDLERS.clear()


def _unwrap_list(items: list | tuple) -> list:
    return [x._raw if type(x) is DipuTensor else x for x in items]


def _first_device(args: tuple) -> torch.device | None:
    for x in args:
        if type(x) is DipuTensor:
            return x.device
        if (type(x) is list or type(x) is tuple) and x:
            for y in x:
                if type(y) is DipuTensor:
                    return y.device
    return None


def _write_aliases(schema: torch._C.FunctionSchema) -> list[int | str] | None:
    """For each return that aliases a written argument, that argument's position or keyword name."""
    if not schema.returns:
        return None
    sources: list[int | str] = []
    for ret in schema.returns:
        info = ret.alias_info
        if info is None or not info.is_write:
            return None
        for pos, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write and arg.alias_info.before_set & info.before_set:
                sources.append(arg.name if arg.kwarg_only else pos)
                break
        else:
            return None
    return sources


def _returns_view(schema: torch._C.FunctionSchema) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def build_handler(func: torch._ops.OpOverload) -> Handler:
    """Build, cache and return the handler for ATen overload ``func``."""
    state = get_state()
    schema = func._schema
    plan = kernels.select(func, state)
    kernel = plan.kernel
    memory = state.memory
    write_sources = _write_aliases(schema)
    single_return = len(schema.returns) == 1
    is_view = _returns_view(schema)
    has_device_kwarg = any(a.name == "device" and a.kwarg_only for a in schema.arguments)
    has_generator = any(a.name == "generator" for a in schema.arguments)
    generators = state.generators

    def wrap(out: Any, device: torch.device) -> Any:
        if type(out) is _Tensor:
            if not is_view:
                memory.track(out, device.index)
            return DipuTensor(out, device)
        if type(out) is tuple or type(out) is list:
            return type(out)(wrap(o, device) for o in out)
        return out

    def handler(args: tuple, kwargs: dict | None) -> Any:
        device = None
        uargs = []
        append = uargs.append
        for x in args:
            t = type(x)
            if t is DipuTensor:
                if device is None:
                    device = x.device
                append(x._raw)
            elif (t is list or t is tuple) and x:
                if device is None:
                    device = _first_device(x)
                append(_unwrap_list(x))
            else:
                append(x)
        if kwargs:
            ukwargs = {}
            for k, v in kwargs.items():
                t = type(v)
                if t is DipuTensor:
                    if device is None:
                        device = v.device
                    v = v._raw
                elif t is list or t is tuple:
                    if device is None:
                        device = _first_device(v)
                    v = _unwrap_list(v)
                ukwargs[k] = v
        else:
            ukwargs = {}
        target = device
        if has_device_kwarg:
            requested = ukwargs.get("device")
            if requested is not None:
                requested = torch.device(requested)
                if requested.type == "dipu":
                    target = requested if requested.index is not None else state.device()
                    ukwargs["device"] = _CPU
                else:
                    target = None
        if has_generator and ukwargs.get("generator") is None and target is not None:
            ukwargs["generator"] = generators[target.index]
        out = kernel(func, *uargs, **ukwargs)
        if write_sources is not None:
            results = [args[s] if type(s) is int else kwargs[s] for s in write_sources]
            return results[0] if single_return else tuple(results)
        if target is None:
            return out
        return wrap(out, target)

    _HANDLERS[func] = handler
    return handler
