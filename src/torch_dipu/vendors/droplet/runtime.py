"""The droplet runtime: host-RAM device memory; its kernels come from droplet's DIOPI implementation
(:mod:`diopi.impl.droplet`: reference kernels, traits and faults), the same ones ``--impl droplet`` runs."""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from diopi import DiopiFunction
from diopi.impl.droplet import DropletImpl, DropletTraits, Fault
from torch_dipu.runtime import DeviceRuntime, Kernel


def _onnx_installed() -> bool:
    """Whether onnx and onnxruntime can be imported (looked up, not imported: cheap at ``import torch_dipu``)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))


class DropletRuntime(DeviceRuntime):
    """A simulated accelerator: memory is host RAM, kernels are the DIOPI reference implementation."""

    name = "droplet"
    host_storage = True  # device memory is host RAM
    #: torch.compile's default backend for graphs on droplet: dicp's ONNX Runtime vendor when onnx and
    #: onnxruntime are installed (the ``onnx`` extra), else aot_eager.
    compile_backend = "onnxgraph" if _onnx_installed() else "aot_eager"

    def __init__(self, traits: DropletTraits, faults: list[Fault]) -> None:
        self.traits = traits
        self.faults = faults
        self._listeners: list[Callable[[], None]] = []

    # -- DeviceRuntime --------------------------------------------------------------------------------
    def device_count(self) -> int:
        return self.traits.device_count

    def memory_capacity(self, index: int) -> int:
        return self.traits.memory_capacity

    def raw_malloc(self, index: int, nbytes: int) -> int:
        self._latency()
        return super().raw_malloc(index, nbytes)

    def raw_free(self, index: int, address: int, nbytes: int) -> None:
        self._latency()
        super().raw_free(index, address, nbytes)

    def _latency(self) -> None:
        """Busy-wait ``malloc_latency_us`` (``DROPLET_MALLOC_LATENCY_US``), as a driver's malloc/free takes."""
        if self.traits.malloc_latency_us:
            end = time.perf_counter_ns() + int(self.traits.malloc_latency_us * 1000)
            while time.perf_counter_ns() < end:
                pass

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype not in self.traits.unsupported_dtypes

    def properties(self, index: int) -> dict[str, Any]:
        return {
            "name": "droplet (simulated accelerator)",
            "total_memory": self.traits.memory_capacity,
            "matmul_precision": self.traits.matmul_precision,
            "multi_processor_count": os.cpu_count() or 1,
            "pci_bus_id": index,  # the card's slot: tells droplet's devices apart (as CUDA's bus id does)
        }

    @property
    def impl(self) -> DropletImpl:
        """droplet's DIOPI implementation with this runtime's current traits and faults."""
        return DropletImpl(self.traits, tuple(self.faults))

    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        return self.impl.kernel(fn, op)

    def on_config_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    # -- switches -------------------------------------------------------------------------------------
    def reconfigure(self, **changes: Any) -> None:
        """Change traits (``device_count``, ``memory_capacity``, ``unsupported_dtypes``,
        ``matmul_precision``, ``malloc_latency_us``) and/or ``faults``; kernels are re-selected on the next call."""
        new = self.impl.replace(**changes)  # nothing changes unless every switch is valid
        self.traits, self.faults = new.traits, list(new.faults)
        for listener in self._listeners:
            listener()
