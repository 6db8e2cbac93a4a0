"""The floors of a Python device, measured beside dipu by ``bench_dipu.py``: what any device written in Python
pays before doing any work of its own.

* :func:`empty_dispatch_mode`: a ``TorchDispatchMode`` that calls every operator through unchanged (the cost of
  leaving C++ for Python once per operator);
* :class:`NopTensor`: a do-nothing wrapper subclass, written as fast as we can: ``_make_wrapper_subclass`` around a
  CPU tensor, ``__torch_dispatch__`` unwraps the arguments, calls the operator, wraps the results (in-place and
  ``out=`` overloads return the caller's wrapper; views wrap their storage tensor). A real device does at least
  this per operator; everything dipu does beyond it is its own cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_make_wrapper = torch.Tensor._make_wrapper_subclass
_Tensor = torch.Tensor
_STRIDED = torch.strided


def empty_dispatch_mode() -> TorchDispatchMode:
    """A dispatch mode that passes every operator through."""

    class EmptyDispatchMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            return func(*args, **(kwargs or {}))

    return EmptyDispatchMode()


def _written_argument(func: torch._ops.OpOverload) -> int | str | None:
    """The argument (position, or keyword name) the overload's single result aliases and writes, if any."""
    schema = func._schema
    if len(schema.returns) != 1 or schema.returns[0].alias_info is None or not schema.returns[0].alias_info.is_write:
        return None
    sets = schema.returns[0].alias_info.before_set
    for pos, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write and arg.alias_info.before_set & sets:
            return arg.name if arg.kwarg_only else pos
    return None


_NOT_BUILT = object()
_WRITTEN: dict[Any, Any] = {}


class NopTensor(torch.Tensor):
    """A CPU tensor behind a wrapper: every operator unwraps, runs on the CPU, rewraps (``_raw`` holds the data)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, raw: torch.Tensor) -> NopTensor:
        return wrap(raw)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        written = _WRITTEN.get(func, _NOT_BUILT)
        if written is _NOT_BUILT:
            written = _WRITTEN[func] = _written_argument(func)
        uargs = [x._raw if type(x) is NopTensor else (_unwrap_list(x) if type(x) is list else x) for x in args]
        if kwargs:
            out = func(*uargs, **{k: v._raw if type(v) is NopTensor else v for k, v in kwargs.items()})
        else:
            out = func(*uargs)
        if written is not None:
            return args[written] if type(written) is int else kwargs[written]
        if type(out) is _Tensor:
            return wrap(out)
        if type(out) is tuple or type(out) is list:
            return type(out)(wrap(o) if type(o) is _Tensor else o for o in out)
        return out


def _unwrap_list(items: list) -> list:
    return [x._raw if type(x) is NopTensor else x for x in items]


def wrap(raw: torch.Tensor) -> NopTensor:
    """``raw`` behind a :class:`NopTensor` with its sizes, strides and offset."""
    if raw.is_contiguous() and not raw.storage_offset():
        wrapper = _make_wrapper(NopTensor, raw.shape, None, None, None, raw.dtype, _STRIDED, raw.device)
    else:
        wrapper = _make_wrapper(NopTensor, raw.shape, raw.stride(), raw.storage_offset(), None, raw.dtype, _STRIDED,
                                raw.device)
    wrapper._raw = raw
    return wrapper


def to_nop(module: torch.nn.Module) -> torch.nn.Module:
    """Put every parameter and buffer of ``module`` behind a :class:`NopTensor` (tied parameters stay tied)."""
    made: dict[int, torch.nn.Parameter] = {}
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None:
                if id(param) not in made:
                    made[id(param)] = torch.nn.Parameter(wrap(param.detach()), requires_grad=param.requires_grad)
                sub._parameters[name] = made[id(param)]
        for name, buf in sub._buffers.items():
            if buf is not None and type(buf) is not NopTensor:
                sub._buffers[name] = wrap(buf)
    return module


def _to_nop(value: Any) -> Any:
    return to_nop(value) if isinstance(value, torch.nn.Module) else wrap(value)


def w1_step_nop(seed: int = 0) -> Callable[[], float]:
    """W1's training step (bench_common.w1_step) with the model, optimizer state and inputs behind NopTensor."""
    from bench_common import w1_step

    return w1_step("cpu", seed, convert=_to_nop)
