"""Kernels registered on the PrivateUse1 key for calls that never reach ``__torch_dispatch__``.

Factories (``torch.empty(..., device="dipu")``) have no tensor argument, and ``torch.tensor(data,
device="dipu")`` copies through ``aten::_copy_from`` below the Python key, so these are registered
with ``torch.library`` directly (into the library object torch_dipu.registration keeps alive).
"""

from __future__ import annotations

import torch

from torch_dipu import host_sync
from torch_dipu.runtime import UnsupportedDtypeError
from torch_dipu.state import get_state
from torch_dipu.storage import device_storage
from torch_dipu.tensor import DipuTensor, storage_of


def check_dtype(dtype: torch.dtype) -> None:
    """Raise UnsupportedDtypeError if the active device cannot hold ``dtype``."""
    runtime = get_state().runtime
    if not runtime.supports_dtype(dtype):
        raise UnsupportedDtypeError(
            f"{runtime.name} does not support dtype {dtype} (unsupported on this device); "
            "cast the tensor to a supported dtype first"
        )


def storage_span(size, stride) -> int:  # noqa: ANN001
    """Elements of storage a tensor of these sizes and strides reaches (from offset 0)."""
    return 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True)) if all(size) else 0


def allocate_storage(size, stride, dtype: torch.dtype, index: int) -> torch.Tensor:  # noqa: ANN001
    """The vendor's storage tensor for device ``index``, its allocator block taken before the memory is (an
    impossible request raises before any host memory is taken; no dtype check: callers that hold raw bytes
    allocate ``uint8``)."""
    state = get_state()
    return state.memory.allocate(index, storage_span(size, stride) * dtype.itemsize,
                                 lambda: state.runtime.new_storage(tuple(size), tuple(stride), dtype))


def new_tensor(size, stride, dtype, device) -> DipuTensor:  # noqa: ANN001
    """Allocate an uninitialized dipu tensor, checking capacity before the host memory is taken."""
    index = get_state().device_index(device)
    dtype = dtype or torch.get_default_dtype()
    check_dtype(dtype)
    return DipuTensor(allocate_storage(size, stride, dtype, index), torch.device("dipu", index))


def _contiguous_strides(size) -> tuple[int, ...]:  # noqa: ANN001
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):  # noqa: ANN001, ANN201
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        return new_tensor(size, _contiguous_strides(size), dtype, device)
    probe = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format)
    return new_tensor(size, probe.stride(), dtype, device)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):  # noqa: ANN001, ANN201
    return new_tensor(size, stride, dtype, device)


def copy_from(src, dst, non_blocking=False):  # noqa: ANN001, ANN201
    """``dst.copy_(src)`` where one side is a dipu tensor."""
    if type(dst) is DipuTensor:
        check_dtype(dst.dtype)
    host_sync.copied(src, dst, non_blocking, "aten._copy_from")
    storage_of(dst).copy_(storage_of(src))
    return dst


def copy_from_and_resize(src, dst):  # noqa: ANN001, ANN201
    if tuple(dst.shape) != tuple(src.shape):
        raise RuntimeError(
            f"dipu: cannot copy a tensor of shape {tuple(src.shape)} into one of shape {tuple(dst.shape)}"
        )
    return copy_from(src, dst)


def efficient_zero_tensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):  # noqa: ANN001, ANN201
    """``aten::_efficientzerotensor`` (autograd's zero gradients, e.g. ``sgn`` of a real tensor): dense zeros."""
    out = new_tensor(size, _contiguous_strides(size), dtype, device)
    out._raw.zero_()
    return out


def restore_location(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage | None:
    """``torch.load(..., map_location="dipu[:N]")``: the checkpoint's host storage copied to the device.

    PyTorch then rebuilds each tensor with ``set_`` on the returned dipu storage, so tensors saved from the CPU
    load onto dipu as they load onto CUDA (dipu tensors are saved as host tensors plus their device, see
    ``DipuTensor.__reduce_ex__``, and come back the same way). Other locations are left to PyTorch.
    """
    if not location.startswith("dipu"):
        return None
    state = get_state()
    index = state.device_index(location)
    nbytes = storage.nbytes()
    raw = allocate_storage((nbytes,), (1,), torch.uint8, index)
    if nbytes:
        raw.copy_(torch.empty(0, dtype=torch.uint8).set_(storage.untyped() if isinstance(storage, torch.TypedStorage)
                                                          else storage))
    return device_storage(raw.untyped_storage(), state.device(index))


def register(lib: torch.library.Library) -> None:
    """Register the PrivateUse1 kernels into ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("empty.memory_format", empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    lib.impl("_copy_from", copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", copy_from_and_resize, "PrivateUse1")
    lib.impl("_efficientzerotensor", efficient_zero_tensor, "PrivateUse1")


__all__ = [
    "allocate_storage", "copy_from", "empty_memory_format", "empty_strided", "new_tensor", "register",
    "restore_location", "storage_span",
]
