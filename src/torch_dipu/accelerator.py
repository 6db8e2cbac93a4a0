"""``torch.accelerator`` on dipu: device index and synchronize routed to ``torch.dipu``.

``torch.accelerator`` asks the backend's C++ device guard for the current device index and to
synchronize. PyTorch's Python device guard always answers index 0 and cannot synchronize, so when
dipu is the current accelerator, the five primitives ``torch.accelerator`` calls are routed to
``torch.dipu``; for any other accelerator the originals run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_dipu import device_module

_PRIMITIVES = (
    "_accelerator_getDeviceIndex",
    "_accelerator_setDeviceIndex",
    "_accelerator_exchangeDevice",
    "_accelerator_maybeExchangeDevice",
    "_accelerator_synchronizeDevice",
)
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def _dipu_is_current() -> bool:
    current = torch._C._accelerator_getAccelerator()
    return current is not None and current.type == "dipu"


def _get_index() -> int:
    return device_module.current_device()


def _set_index(index: int) -> None:
    if index >= 0:
        device_module.set_device(index)


def _exchange(index: int) -> int:
    previous = device_module.current_device()
    _set_index(index)
    return previous


def _synchronize(index: int) -> None:
    device_module.synchronize(None if index < 0 else index)


_DIPU_IMPLS: dict[str, Callable[..., Any]] = {
    "_accelerator_getDeviceIndex": _get_index,
    "_accelerator_setDeviceIndex": _set_index,
    "_accelerator_exchangeDevice": _exchange,
    "_accelerator_maybeExchangeDevice": _exchange,
    "_accelerator_synchronizeDevice": _synchronize,
}


def _routed(name: str) -> Callable[..., Any]:
    original, dipu_impl = _ORIGINALS[name], _DIPU_IMPLS[name]

    def primitive(*args: Any) -> Any:
        return dipu_impl(*args) if _dipu_is_current() else original(*args)

    primitive.__name__ = name
    return primitive


def install() -> None:
    """Route the ``torch.accelerator`` primitives (idempotent)."""
    if _ORIGINALS:
        return
    for name in _PRIMITIVES:
        _ORIGINALS[name] = getattr(torch._C, name)
    for name in _PRIMITIVES:
        setattr(torch._C, name, _routed(name))
