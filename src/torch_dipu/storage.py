"""Storages of dipu tensors: ``t.untyped_storage()`` as a CUDA tensor answers it.

A dipu tensor is a wrapper whose own C++ storage holds no memory; its data lives in the vendor's storage
tensor (``_raw``). :func:`device_storage` answers ``untyped_storage()`` with a ``torch.UntypedStorage`` on
the dipu device that aliases the vendor's memory: ``data_ptr()``, ``nbytes()`` and ``device`` are the real
ones, so sharing checks (``a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()``) and the
libraries that save through them (safetensors, ``save_pretrained``) work; a tensor and all its views get
the same storage object while it is alive. Operations PyTorch runs on such a storage (``.cpu()``,
indexing, ``fill_``, ``copy_``, ``Tensor.set_``) come back to torch_dipu as ``set_`` with a dipu storage,
which :func:`host_storage` maps back to the vendor's storage. The dipu storage keeps the vendor's storage
alive. ``resize_(nbytes)`` resizes the vendor's storage, as on CUDA: every tensor and view sharing it sees the
new memory (FSDP2 frees and re-allocates unsharded parameters this way) and the caching allocator moves the
storage to a block of the new size. The storage object it was called on keeps describing the old memory (its
address and size are fixed): use the storage ``resize_`` returns, or ask the tensor for ``untyped_storage()``
again.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

_KEEPALIVE = "_dipu_host_storage"
# host data pointer -> the dipu storage aliasing it (weak: a storage object lives as long as its users)
_VIEWS: dict[int, weakref.ref] = {}


def device_storage(host: torch.UntypedStorage, device: torch.device) -> torch.UntypedStorage:
    """The ``torch.UntypedStorage`` on ``device`` that aliases vendor storage ``host``."""
    ptr = host.data_ptr()
    ref = _VIEWS.get(ptr)
    cached = ref() if ref is not None else None
    if (cached is not None and getattr(cached, _KEEPALIVE) is host and cached.device == device
            and cached.nbytes() == host.nbytes()):
        return cached
    storage = torch._C._construct_storage_from_data_pointer(ptr, device, host.nbytes())
    setattr(storage, _KEEPALIVE, host)
    storage.resize_ = _Resize(host, device)  # an instance attribute comes before StorageBase.resize_
    if ptr:
        _VIEWS[ptr] = weakref.ref(storage, lambda _ref, ptr=ptr: _forget(ptr, _ref))
    return storage


class _Resize:
    """``resize_(nbytes)`` of a dipu storage: resizes the vendor's storage ``host`` (see the module docstring)."""

    __slots__ = ("device", "host")

    def __init__(self, host: torch.UntypedStorage, device: torch.device) -> None:
        self.host, self.device = host, device

    def __call__(self, nbytes: int) -> torch.UntypedStorage:
        """Resize; returns the dipu storage of the resized memory."""
        from torch_dipu.state import get_state

        if nbytes != self.host.nbytes():
            get_state().memory.resize_storage(self.host, self.device.index, nbytes)
        return device_storage(self.host, self.device)


def _forget(ptr: int, ref: weakref.ref) -> None:
    if _VIEWS.get(ptr) is ref:
        del _VIEWS[ptr]


def host_storage(storage: Any) -> Any:
    """The vendor storage behind dipu storage ``storage`` (anything else is returned unchanged)."""
    if isinstance(storage, torch.TypedStorage):
        storage = storage.untyped()
    if not isinstance(storage, torch.UntypedStorage) or storage.device.type != "dipu":
        return storage
    if not storage.nbytes():
        return torch.UntypedStorage(0)
    host = getattr(storage, _KEEPALIVE, None)
    if host is None:
        ref = _VIEWS.get(storage.data_ptr())
        view = ref() if ref is not None else None
        host = getattr(view, _KEEPALIVE, None) if view is not None else None
    if host is None or host.nbytes() < storage.nbytes():
        raise RuntimeError(
            f"dipu: this {storage.device} storage was not made by torch_dipu (dipu storages come from "
            "Tensor.untyped_storage()); create dipu tensors with torch.empty(..., device='dipu') instead"
        )
    return host


def has_storage_argument(schema: torch._C.FunctionSchema) -> bool:
    return any(str(a.type) in ("Storage", "Storage?") for a in schema.arguments)
