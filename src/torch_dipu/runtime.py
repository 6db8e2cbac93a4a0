"""The runtime interface a vendor implements to bring up a device under torch_dipu.

This is the Python counterpart of DIPU's ``deviceapis.h``: device enumeration, memory capacity,
synchronization, event timestamps, random generators, supported dtypes and the operator kernels.
Everything device-independent (memory statistics, streams, events, dispatch, fallback) is built on
top of it by torch_dipu. A vendor's storage tensors (``DipuTensor._raw``) are host-visible tensors.
"""

from __future__ import annotations

import datetime
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from diopi import DiopiFunction
from diopi.impls import UnsupportedDtypeError  # noqa: F401  (one class: vendor kernels raise it, so does torch_dipu)

Kernel = Callable[..., Any]


class DeviceRuntime(ABC):
    """Base class of a vendor runtime. Subclasses override the abstract methods; the rest have defaults."""

    #: Vendor name shown in messages and ``torch.dipu.get_device_name``.
    name: str = "vendor"
    #: The registered dynamo backend that compiles graphs on this device under ``torch.compile``'s default
    #: backend (a vendor with its own graph compiler names it); ``DIPU_COMPILE_BACKEND`` overrides it.
    compile_backend: str = "aot_eager"
    #: Storage tensors are host tensors the host may read and write (a graph compiler running on the host, such
    #: as dicp's onnxgraph, then reads and writes them in place instead of copying).
    host_storage: bool = False

    @abstractmethod
    def device_count(self) -> int:
        """Number of devices the vendor has. Every ``index`` torch_dipu passes to this runtime is the
        vendor's own; torch_dipu maps ``dipu:i`` onto them (``DIPU_VISIBLE_DEVICES`` selects and orders
        them), so a vendor never handles the visibility variable itself."""

    @abstractmethod
    def memory_capacity(self, index: int) -> int:
        """Total memory of device ``index`` in bytes."""

    @abstractmethod
    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        """The vendor's implementation of DIOPI function ``fn`` for ATen overload ``op``, or None.

        None makes the overload fall back to CPU.

        A kernel is called as ``kernel(op, *args, **kwargs)`` with the ATen overload and its arguments,
        device tensors replaced by storage tensors, and returns what the overload returns.
        """

    def synchronize(self, index: int) -> None:  # noqa: B027  (optional hook with a no-op default)
        """Wait until all work queued on device ``index`` has finished (droplet runs synchronously)."""

    def timestamp_ns(self, index: int) -> int:
        """A device clock reading, used by events (``Event.elapsed_time``)."""
        return time.perf_counter_ns()

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        """Whether kernels of this device accept ``dtype``."""
        return True

    def new_storage(self, size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Allocate an uninitialized storage tensor with the given geometry."""
        return torch.empty_strided(size, stride, dtype=dtype)

    def raw_malloc(self, index: int, nbytes: int) -> int:
        """Reserve ``nbytes`` (a multiple of 512) of device ``index``'s memory; return its device address.

        torch_dipu's caching allocator calls this for whole segments, never per tensor. A full device raises
        ``torch.OutOfMemoryError``. The default keeps the books of an address space of ``memory_capacity``
        bytes (:class:`torch_dipu.address_space.AddressSpace`); a vendor with real device memory overrides both
        methods."""
        return self._address_space(index).malloc(nbytes, self.memory_capacity(index))

    def raw_free(self, index: int, address: int, nbytes: int) -> None:
        """Release ``[address, address + nbytes)``: any 512-byte-aligned sub-range of an earlier ``raw_malloc``
        (as CUDA's expandable segments unmap pages). An unknown address or a double free raises RuntimeError."""
        self._address_space(index).free(address, nbytes)

    def _address_space(self, index: int) -> Any:
        spaces = self.__dict__.setdefault("_address_spaces", {})
        space = spaces.get(index)
        if space is None:
            from torch_dipu.address_space import AddressSpace

            space = spaces[index] = AddressSpace(index, self.name)
        return space

    def new_pinned_host_storage(self, size: tuple[int, ...], stride: tuple[int, ...],
                                dtype: torch.dtype) -> torch.Tensor:
        """Allocate uninitialized page-locked host memory (``Tensor.pin_memory()``) that the device can copy
        from without staging. Python vendors copy synchronously, so ordinary host memory serves."""
        return torch.empty_strided(size, stride, dtype=dtype)

    def collective_backend(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Any:
        """The c10d backend that carries the ``dicl`` collectives of one process group (:mod:`torch_dipu.dicl`).

        It receives this vendor's storage tensors (those :meth:`new_storage` makes). The default is gloo over
        host buffers, right for storage in host memory; a vendor with a collective library (hccl, cncl, ...)
        returns its backend here. ``store`` is the group's prefixed store, ``timeout`` the group's timeout.

        The default group has one worker thread (PyTorch's constructor starts two per network device): dicl
        completes each collective before it issues the next, and one worker finishes with a work before it takes
        the next, which dicl relies on to release every work itself (``torch_dipu.dicl_watch.GroupState.keep``).
        A vendor's backend whose threads release a work's tensors after completing it must do the same.
        """
        import os

        from torch.distributed import ProcessGroupGloo

        options = ProcessGroupGloo._Options()
        options._timeout = timeout
        # The network devices as PyTorch's constructor picks them (GLOO_SOCKET_IFNAME is PyTorch's variable).
        interfaces = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name.strip()]
        options._devices = ([ProcessGroupGloo.create_device(interface=name.strip()) for name in interfaces]
                            or [ProcessGroupGloo.create_default_device()])
        options._threads = 1
        return ProcessGroupGloo(store, rank, size, options)

    def properties(self, index: int) -> dict[str, Any]:
        """Static device properties reported by ``torch.dipu.get_device_properties``."""
        return {"name": self.name, "total_memory": self.memory_capacity(index)}

    def on_config_change(self, callback: Callable[[], None]) -> None:  # noqa: B027
        """Register ``callback`` to run when the vendor's switches change (kernels must be re-selected)."""
