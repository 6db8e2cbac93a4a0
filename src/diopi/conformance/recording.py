"""Record the ATen calls of one DIOPI function while torch-level code runs on the CPU.

:class:`CallRecorder` is a ``TorchDispatchMode``: every operator call reaching it whose packet belongs to the
DIOPI function asked for is kept with a clone of its inputs taken before the call (same shape, stride and storage
offset, so a non-contiguous input stays one). ``call=`` configs run their callable under it; ``from_forward=``
configs run the forward function and then ``backward()`` under it, so the backward function's calls are recorded
with their real inputs (saved tensors, gradients).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import diopi
from diopi.case_format import host_copy
from diopi.registry import dispatcher_overloads, is_composite, qualified_name
from diopi.tensor_walk import map_leaves, tensors_in


@dataclass
class RecordedCall:
    """One recorded call: the overload and host clones of its arguments as they were before the call."""

    op: torch._ops.OpOverload
    args: list[Any]
    kwargs: dict[str, Any]


def clone_args(value: Any) -> Any:
    """``value`` with every tensor replaced by a host copy keeping its layout (:func:`diopi.case_format.host_copy`)."""
    return map_leaves(value, lambda x: host_copy(x) if isinstance(x, torch.Tensor) else x)


class CallRecorder(TorchDispatchMode):
    """Keeps the calls of DIOPI function ``function`` (its name; None: of every DIOPI function) made while the
    mode is active."""

    def __init__(self, function: str | None) -> None:
        super().__init__()
        self.function = function
        self.calls: list[RecordedCall] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        self.keep(func, args, kwargs)
        return func(*args, **kwargs)

    def keep(self, func: torch._ops.OpOverload, args: Any, kwargs: dict) -> None:
        """Record ``func``'s call when it belongs to the function asked for."""
        owner = diopi.function_for_aten(func)
        if owner is not None and (self.function is None or owner.name == self.function):
            self.calls.append(RecordedCall(func, clone_args(list(args)), clone_args(dict(kwargs))))

    def __enter__(self) -> CallRecorder:
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        _ACTIVE.remove(self)


_ACTIVE: list[CallRecorder] = []
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def _composite_overloads() -> Iterator[torch._ops.OpOverload]:
    """The CompositeImplicitAutograd overloads of the table's packets that compute a new result (no ``out=``,
    in-place or view overloads): on the CPU they decompose before a dispatch mode could see them."""
    for fn in diopi.functions():
        for packet in fn.aten:
            for op in dispatcher_overloads(packet):
                schema = op._schema
                if is_composite(op) and not any(a.alias_info is not None for a in (*schema.arguments, *schema.returns)):
                    yield op


@contextlib.contextmanager
def composites_recorded() -> Iterator[None]:
    """While active, an active :class:`CallRecorder` also records the calls of composite operators of the table
    (``linear``, ``cross_entropy_loss``, ...) as themselves, before their decomposition runs as usual on the CPU:
    a device that claims them (torch_dipu does) runs them as one kernel, so a case of that kernel is wanted."""
    libraries: dict[str, torch.library.Library] = {}

    def make(op: torch._ops.OpOverload) -> Callable[..., Any]:
        def recording(*args: Any, **kwargs: Any) -> Any:
            if _ACTIVE:
                with _disable_current_modes():  # the copies taken are not calls of the recorded code
                    _ACTIVE[-1].keep(op, args, kwargs)
            return op._op_dk(_CIA, *args, **kwargs)
        return recording

    try:
        for op in _composite_overloads():
            name = qualified_name(op)
            if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutogradCPU"):
                continue
            if op.namespace not in libraries:
                libraries[op.namespace] = torch.library.Library(op.namespace, "IMPL")
            libraries[op.namespace].impl(name.split("::", 1)[1], make(op), "AutogradCPU")
        yield
    finally:
        for library in libraries.values():
            library._destroy()


def record(function: str, run: Callable[[], Any]) -> list[RecordedCall]:
    """The calls of DIOPI function ``function`` made by ``run()`` (on the CPU)."""
    with CallRecorder(function) as recorder:
        run()
    return recorder.calls


def record_backward(function: str, forward: Callable[[], Any], generator: torch.Generator) -> list[RecordedCall]:
    """Run ``forward()`` (whose differentiable inputs require grad), then ``backward()`` from every floating output
    that requires grad with a random gradient drawn from ``generator``; the calls of ``function`` made during the
    backward pass."""
    outputs = [t for t in tensors_in(forward()) if t.requires_grad and t.dtype.is_floating_point]
    if not outputs:
        return []
    grads = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype) for t in outputs]
    with CallRecorder(function) as recorder:
        torch.autograd.backward(outputs, grads)
    return recorder.calls
