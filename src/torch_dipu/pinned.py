"""Pinned host memory for dipu: ``Tensor.pin_memory()``, ``is_pinned()`` and ``DataLoader(pin_memory=True)``.

PyTorch pins host memory through an allocator that a backend provides from C++, which a Python backend
cannot; with dipu as the current accelerator ``pin_memory()`` would raise NotImplementedError. The seam is
the pair of host operators ``aten::_pin_memory`` and ``aten::is_pinned``: torch_dipu registers CPU kernels
for them that handle the calls aimed at dipu (``device="dipu"``, or no device while dipu is the current
accelerator) and hand every other call to PyTorch's own kernel, unchanged. Pinned memory comes from the
vendor (:meth:`DeviceRuntime.new_pinned_host_storage`); pinned storages are remembered until they die, so
``is_pinned()`` answers for them and their views.

``torch.empty(..., pin_memory=True)`` and other factories asking for pinned memory still need the C++
allocator: create the tensor, then call ``.pin_memory()``.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

# data pointer of a pinned storage -> weak reference to that storage
_PINNED: dict[int, weakref.ref] = {}
_ORIGINAL: dict[str, Any] = {}


def _aimed_at_dipu(device: torch.device | None) -> bool:
    if device is not None:
        return device.type == "dipu"
    current = torch._C._accelerator_getAccelerator()
    return current is not None and current.type == "dipu"


def _remember(storage: torch.UntypedStorage) -> None:
    ptr = storage.data_ptr()

    def forget(ref: weakref.ref, ptr: int = ptr) -> None:
        if _PINNED.get(ptr) is ref:
            del _PINNED[ptr]

    _PINNED[ptr] = weakref.ref(storage, forget)


def is_pinned_by_dipu(t: torch.Tensor) -> bool:
    """Whether host tensor ``t`` lives in memory pinned for dipu."""
    ref = _PINNED.get(t.untyped_storage().data_ptr())
    return ref is not None and ref() is not None


def _pin_memory(keyset: Any, self: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    if not _aimed_at_dipu(device):
        return _ORIGINAL["_pin_memory"].call_boxed(keyset, self, device)
    from torch_dipu.factories import storage_span
    from torch_dipu.state import get_state

    # As PyTorch pins: new memory spanning exactly the tensor's elements, same sizes and strides, offset 0.
    span = storage_span(self.shape, self.stride())
    base = get_state().runtime.new_pinned_host_storage((span,), (1,), self.dtype)
    _remember(base.untyped_storage())
    return base.as_strided(self.shape, self.stride(), 0).copy_(self)


def _is_pinned(keyset: Any, self: torch.Tensor, device: torch.device | None = None) -> bool:
    if _PINNED and _aimed_at_dipu(device) and is_pinned_by_dipu(self):
        return True
    return _ORIGINAL["is_pinned"].call_boxed(keyset, self, device)


def register(lib: torch.library.Library) -> None:
    """Register the CPU kernels into ``lib`` (an ``aten`` IMPL library), keeping PyTorch's for the rest."""
    for name, kernel in (("_pin_memory", _pin_memory), ("is_pinned", _is_pinned)):
        _ORIGINAL[name] = torch.library.get_kernel(f"aten::{name}", "CPU")
        lib.impl(name, kernel, "CPU", with_keyset=True)
