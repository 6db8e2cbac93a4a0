"""The dipu tensor: a PyTorch tensor on the ``dipu`` device whose storage handle is owned by the vendor.

A :class:`DipuTensor` is a wrapper subclass (sizes, strides, dtype and device live in the wrapper;
the data lives in ``_raw``, the vendor's storage tensor). Every ATen operator that reaches it after
autograd and autocast goes to :meth:`DipuTensor.__torch_dispatch__`, which hands it to
:mod:`torch_dipu.dispatch`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from torch_dipu.storage import device_storage

_make_wrapper = torch.Tensor._make_wrapper_subclass


class DipuTensor(torch.Tensor):
    """A tensor on the dipu device. ``_raw`` is the vendor's storage tensor with the same view metadata."""

    # ``_raw`` lives in the instance dict, not in a slot: a parameter moved onto dipu keeps its Python
    # object by changing its class (torch_dipu.module_state), which needs the layout of torch.Tensor.

    # Skip Python-level __torch_function__ handling: it would tax every tensor method call.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, raw: torch.Tensor, device: torch.device) -> DipuTensor:
        wrapper = _make_wrapper(
            cls,
            raw.shape,
            strides=raw.stride(),
            storage_offset=raw.storage_offset(),
            dtype=raw.dtype,
            device=device,
        )
        wrapper._raw = raw
        return wrapper

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        handler = _HANDLERS.get(id(func))  # by id: OpOverload's __hash__ is a Python method
        if handler is None:
            handler = _build_handler(func)
        try:
            return handler(args, kwargs)
        except Exception as exc:
            if torch._C._current_graph_task_id() == -1:
                raise
            return _defer_backward_error(func, exc)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        # Print like a CUDA tensor: tensor([...], device='dipu:0'). The values are formatted from a host
        # copy, so printing needs no device kernels (the formatter uses float64, which some devices lack).
        prefix = type(self).__name__ + "("
        if tensor_contents is None and self.numel() > 0 and self.layout == torch.strided:
            tensor_contents = torch._tensor_str._tensor_str(self.detach().cpu(), len(prefix))
        text = super().__repr__(tensor_contents=tensor_contents)
        is_param = text.startswith("Parameter(" + prefix)
        if is_param:  # torch prints custom-tensor parameters as Parameter(DipuTensor(...))
            text = text[len("Parameter("):-1]
        if text.startswith(prefix):
            pad = " " * (len(prefix) - len("tensor("))
            text = "tensor(" + text[len(prefix):].replace("\n" + pad, "\n")
        return "Parameter containing:\n" + text if is_param else text

    def __deepcopy__(self, memo: dict[int, Any]) -> DipuTensor:
        # torch's version would deep-copy ``_raw`` over the clone's own (accounted) storage.
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support deepcopy")
        with torch.no_grad():
            new = self.clone()
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for name, value in self.__dict__.items():
            if name != "_raw":
                setattr(new, name, copy.deepcopy(value, memo))
        return new

    @property
    def data(self) -> torch.Tensor:
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        # ``p.data = new`` (Module.to(dtype), optimizers, user code) swaps the tensor's metadata in C++; the
        # vendor storage must follow, or the tensor would say bfloat16 and hold float32.
        _TENSOR_DATA.__set__(self, value)
        self._raw = value._raw if isinstance(value, DipuTensor) else value

    def numpy(self, *, force: bool = False) -> Any:
        if force:
            return self.detach().cpu().numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
            "host memory first."
        )

    def untyped_storage(self) -> torch.UntypedStorage:
        """A storage on this tensor's device aliasing the vendor's memory (see torch_dipu.storage)."""
        return device_storage(self._raw.untyped_storage(), self.device)

    def data_ptr(self) -> int:
        """The address of the first element in the vendor's storage (0 is what PyTorch would answer)."""
        return self._raw.data_ptr()

    def record_stream(self, stream: torch.Stream) -> None:
        """Mark the tensor as used by ``stream`` (a ``torch.Stream`` of its device: ``torch.dipu.Stream``)."""
        if not isinstance(stream, torch.Stream):
            raise TypeError(f"record_stream(): argument 'stream' must be a torch.Stream such as torch.dipu.Stream, "
                            f"not {type(stream).__name__}")
        super().record_stream(stream)

    def tolist(self) -> Any:
        return self.cpu().tolist()

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __reduce_ex__(self, proto: Any) -> Any:
        # Serialize as a CPU tensor plus the device: torch.load(map_location=...) and weights_only work.
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (self.detach().cpu(), self.dtype, str(self.device), self.requires_grad),
        )

    def __coerce_same_metadata_as_tangent__(self, expected_metadata: Any, expected_type: Any = None) -> Any:
        # A graph compiled by AOTAutograd (torch.compile) was traced with fake tensors on the dipu device, so
        # it expects plain tensors as gradients; a dipu tensor is the device's plain tensor. Other subclasses
        # (a traceable wrapper around dipu tensors) are not ours to convert.
        if expected_metadata is None and expected_type in (None, torch.Tensor):
            return self
        return None


_STRIDED = torch.strided
_TENSOR_DATA = torch._C.TensorBase.data


def storage_of(t: Any) -> Any:
    """The vendor storage tensor behind a dipu tensor; anything else is returned unchanged."""
    return t._raw if type(t) is DipuTensor else t


def from_storage(raw: torch.Tensor, device: torch.device) -> DipuTensor:
    """Wrap storage tensor ``raw`` as a dipu tensor on ``device`` (the dispatcher's hot path).

    Same result as ``DipuTensor(raw, device)``; arguments are positional because keyword parsing
    is a measurable part of every operator call.
    """
    if raw.is_contiguous() and not raw.storage_offset():
        wrapper = _make_wrapper(DipuTensor, raw.shape, None, None, None, raw.dtype, _STRIDED, device)
    else:
        wrapper = _make_wrapper(
            DipuTensor, raw.shape, raw.stride(), raw.storage_offset(), None, raw.dtype, _STRIDED, device
        )
    wrapper._raw = raw
    return wrapper


_BACKWARD_ERRORS: list[BaseException] = []


class _FailedInBackward:
    """What ``__torch_dispatch__`` answers for an operator that raised inside a backward pass.

    A Python exception leaving ``__torch_dispatch__`` inside PyTorch's autograd engine stays pending
    while C++ unwinds stream guards whose destructors call the Python device guard; the pending
    exception makes that call fail in a ``noexcept`` function and the process aborts. This object
    instead fails PyTorch's conversion of the result with a C++ error (which carries its text and
    leaves no Python exception pending), so ``backward()`` raises a RuntimeError naming the cause.
    """

    def __init__(self, func: Any, exc: BaseException) -> None:
        self.text = f"[torch_dipu: {func} failed during backward: {type(exc).__name__}: {exc}]"

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def _defer_backward_error(func: Any, exc: BaseException) -> Any:
    """Keep ``exc`` (see :func:`torch_dipu.backward_errors`) and answer with a :class:`_FailedInBackward`
    (one per result, so that an operator with several results fails on the first with this text)."""
    _BACKWARD_ERRORS.append(exc)
    failed = _FailedInBackward(func, exc)
    returns = len(func._schema.returns)
    return failed if returns == 1 else (failed,) * returns


# id(overload) -> its handler, filled by torch_dipu.dispatch through :func:`set_handler` (kept here so the hot
# path does one dict lookup). ``_HANDLED`` holds the overloads, so an id is never reused while its entry lives.
_HANDLERS: dict[int, Any] = {}
_HANDLED: dict[int, Any] = {}


def set_handler(func: Any, handler: Any) -> None:
    """Install ``handler`` for overload ``func``."""
    _HANDLED[id(func)] = func
    _HANDLERS[id(func)] = handler


def forget_handlers() -> None:
    """Forget every installed handler (torch_dipu.dispatch.clear_handlers)."""
    _HANDLERS.clear()
    _HANDLED.clear()


def _build_handler(func):  # noqa: ANN001, ANN202
    raise RuntimeError(f"dipu: no handler builder for {func}; import torch_dipu, which installs torch_dipu.dispatch")


_PYTHON_DISPATCH = DipuTensor.__dict__["__torch_dispatch__"]


def use_compiled_dispatch(fastpath: Any) -> None:
    """Make ``DipuTensor.__torch_dispatch__`` the compiled one of module ``fastpath`` (torch_dipu._fastpath: the same
    lookup, build and errors as the Python one), or the Python one again (None)."""
    DipuTensor.__torch_dispatch__ = _PYTHON_DISPATCH if fastpath is None else classmethod(
        fastpath.Dispatcher(
            _HANDLERS, lambda func: _build_handler(func), torch._C._current_graph_task_id, _defer_backward_error
        )
    )


def set_handler_builder(build: Any) -> None:
    """Install the builder of the handler for an ATen overload not yet in ``_HANDLERS`` (torch_dipu.dispatch
    does at import: the dependency runs from dispatch to this module, never back)."""
    global _build_handler
    _build_handler = build
