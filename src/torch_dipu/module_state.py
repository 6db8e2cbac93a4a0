"""Module state across devices: ``model.to("dipu")`` keeps every parameter the same Python object.

On CUDA, ``Module._apply`` (behind ``to``, ``cuda``, ``half``, ``to_empty``) moves a parameter in place
through ``param.data = moved``: the ``Parameter`` object stays, so weights shared between modules (tied
embeddings) stay shared, optimizers created earlier keep updating the model, and hooks, ``requires_grad``
and parametrizations survive. PyTorch takes that path only between dense C++ backends; for dipu (a Python
tensor subclass) it builds a new ``Parameter`` per module instead. This module wraps ``Module._apply``:
after PyTorch's own conversion, every parameter that PyTorch replaced while moving onto or off dipu takes
over its replacement's tensor in place (:func:`adopt`) and goes back into the module. Moves that involve
no dipu tensor are left exactly as PyTorch made them. Lazy modules' uninitialized parameters and buffers
get dipu placeholder classes that keep them lazy (:func:`uninitialized_like`).

Buffers follow PyTorch's rule on every device: ``_apply`` replaces them with the converted tensor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

from torch_dipu.runtime import UnsupportedDtypeError
from torch_dipu.tensor import DipuTensor, from_storage

_ORIGINAL_APPLY = torch.nn.Module._apply
_HOST_CLASS = "_dipu_host_class"  # the class a parameter had before it moved onto dipu
_state = threading.local()


def _is_dipu(t: Any) -> bool:
    return isinstance(t, DipuTensor)


def adopt(old: torch.Tensor, new: torch.Tensor) -> None:
    """Make ``old`` hold ``new``'s tensor in place: the same Python object afterwards has ``new``'s device,
    dtype and data, keeps its own attributes and hooks, and its gradient object (moved the same way).

    ``new`` is consumed (it ends up holding ``old``'s former tensor)."""
    old_class, new_class = type(old), type(new)
    target = new_class
    if _is_dipu(new) and not _is_dipu(old):
        if isinstance(old, torch.nn.Parameter):
            old._is_param = True  # a dipu parameter is a DipuTensor marked as a parameter
            if not issubclass(new_class, torch.nn.Parameter):
                old.__dict__.setdefault(_HOST_CLASS, old_class)
    elif _is_dipu(old) and not _is_dipu(new):
        target = old.__dict__.pop(_HOST_CLASS, new_class)
        old.__dict__.pop("_is_param", None)
    grad = old.grad
    backward_hooks = old._backward_hooks
    post_hooks = getattr(old, "_post_accumulate_grad_hooks", None)
    new_grad = new.grad
    if new_grad is not None:
        new.grad = None
    torch._C._swap_tensor_impl(old, new)
    old.__class__, new.__class__ = target, old_class
    old_raw, new_raw = old.__dict__.pop("_raw", None), new.__dict__.pop("_raw", None)
    if new_raw is not None:
        old._raw = new_raw
    if old_raw is not None:
        new._raw = old_raw
    if backward_hooks is not None:
        old._backward_hooks = backward_hooks  # re-registers the hook dict on the tensor now held
    if post_hooks is not None:
        old._post_accumulate_grad_hooks = post_hooks
    if new_grad is not None:
        if grad is not None:  # the gradient object stays too, as after CUDA's ``param.grad.data = ...``
            adopt(grad, new_grad)
            new_grad = grad
        old.grad = new_grad


def uninitialized_like(template: torch.Tensor, old: UninitializedTensorMixin) -> torch.Tensor:
    """A dipu placeholder for lazy parameter/buffer ``old`` with ``template``'s device and dtype."""
    cls = DipuUninitializedParameter if isinstance(old, torch.nn.Parameter) else DipuUninitializedBuffer
    return cls(old.requires_grad, device=template.device, dtype=template.dtype)


def _make_placeholder(cls: type, requires_grad: bool, device: Any, dtype: torch.dtype | None) -> torch.Tensor:
    data = torch.empty(0, device=device, dtype=dtype)
    if not _is_dipu(data):
        raise ValueError(f"{cls.__name__} holds dipu tensors, got device {data.device}")
    placeholder = torch.Tensor._make_wrapper_subclass(
        cls, (0,), dtype=data.dtype, device=data.device, requires_grad=requires_grad
    )
    placeholder._raw = data._raw
    if cls is DipuUninitializedParameter:
        placeholder._is_param = True
    return placeholder


class _DipuPlaceholder:
    """Shared behaviour of the dipu placeholders: their own ``data`` and a dispatch that unwraps them."""

    cls_to_become = DipuTensor

    @property
    def data(self) -> torch.Tensor:
        return from_storage(self._raw, self.device)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        DipuTensor.data.fset(self, value)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        def plain(x: Any) -> Any:
            return from_storage(x._raw, x.device) if isinstance(x, _DipuPlaceholder) else x

        args = tuple(plain(a) for a in args)
        kwargs = {k: plain(v) for k, v in (kwargs or {}).items()}
        return DipuTensor.__torch_dispatch__(func, types, args, kwargs)


class DipuUninitializedParameter(_DipuPlaceholder, UninitializedParameter, DipuTensor):
    """A lazy module's uninitialized parameter on dipu; ``materialize`` makes it a dipu parameter."""

    def __new__(cls, requires_grad: bool = True, device: Any = None, dtype: torch.dtype | None = None) -> Any:
        return _make_placeholder(cls, requires_grad, device, dtype)


class DipuUninitializedBuffer(_DipuPlaceholder, UninitializedBuffer, DipuTensor):
    """A lazy module's uninitialized buffer on dipu; ``materialize`` makes it a dipu tensor."""

    def __new__(cls, requires_grad: bool = False, device: Any = None, dtype: torch.dtype | None = None) -> Any:
        return _make_placeholder(cls, requires_grad, device, dtype)


def _placeholder_new(original: Callable[..., Any], dipu_class: type) -> Callable[..., Any]:
    """``UninitializedParameter(device="dipu")`` (what ``LazyLinear(..., device="dipu")`` does) makes a dipu
    placeholder; every other device is PyTorch's own constructor."""
    default_grad = dipu_class is DipuUninitializedParameter

    def __new__(cls: type, requires_grad: bool = default_grad, device: Any = None, dtype: Any = None) -> Any:
        if cls in (UninitializedParameter, UninitializedBuffer):
            probe = torch.empty(0, device=device, dtype=dtype)
            if _is_dipu(probe):
                return dipu_class(requires_grad, device=probe.device, dtype=probe.dtype)
        return original(cls, requires_grad, device, dtype)

    return staticmethod(__new__)


def _move_lazy(module: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Move the module's own uninitialized parameters and buffers onto or off dipu before PyTorch's
    ``_apply`` (which cannot convert them across a Python device)."""
    for table in (module._parameters, module._buffers):
        for key, value in table.items():
            if not isinstance(value, UninitializedTensorMixin):
                continue
            probe = fn(torch.empty(0, dtype=value.dtype, device=value.device))  # where fn sends such a tensor
            if (probe.device, probe.dtype) == (value.device, value.dtype) or not (_is_dipu(probe) or _is_dipu(value)):
                continue  # stays where it is, or a move PyTorch makes itself
            if _is_dipu(probe):
                moved = uninitialized_like(probe, value)
            else:
                base = UninitializedParameter if isinstance(value, torch.nn.Parameter) else UninitializedBuffer
                moved = base(value.requires_grad, device=probe.device, dtype=probe.dtype)
            adopt(value, moved)
            table[key] = value


def _qualified_name(module: torch.nn.Module, tensor: torch.Tensor) -> str:
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for kind, table in (("parameter", sub._parameters), ("buffer", sub._buffers)):
            for key, value in table.items():
                if value is tensor:
                    return f"{kind} '{prefix + '.' if prefix else ''}{key}'"
    return "a tensor"


def _naming_errors(module: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    """``fn``, whose dtype errors name the parameter or buffer being converted."""

    def convert(t: torch.Tensor) -> torch.Tensor:
        try:
            return fn(t)
        except UnsupportedDtypeError as exc:
            name = _qualified_name(module, t)
            raise UnsupportedDtypeError(
                f"cannot move {name} ({t.dtype} on {t.device}) of {type(module).__name__}: {exc}"
            ) from None

    return convert


def _apply(self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
    if not getattr(_state, "depth", 0):
        fn = _naming_errors(self, fn)
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        _move_lazy(self, fn)
        before = [(key, p) for key, p in self._parameters.items() if p is not None]
        result = _ORIGINAL_APPLY(self, fn, recurse)
        for key, old in before:
            new = self._parameters.get(key)
            if new is None or new is old or not (_is_dipu(old) or _is_dipu(new)):
                continue
            adopt(old, new)
            self._parameters[key] = old
        return result
    finally:
        _state.depth -= 1


def install() -> None:
    """Wrap ``Module._apply`` and the lazy placeholders' constructors (idempotent)."""
    if torch.nn.Module._apply is _apply:
        return
    torch.nn.Module._apply = _apply
    UninitializedParameter.__new__ = _placeholder_new(UninitializedParameter.__new__, DipuUninitializedParameter)
    UninitializedBuffer.__new__ = _placeholder_new(UninitializedBuffer.__new__, DipuUninitializedBuffer)
