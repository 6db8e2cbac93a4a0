"""The droplet runtime: host-RAM device memory, DIOPI reference kernels, traits and faults."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import torch

from diopi import DiopiFunction
from torch_dipu.kernels import matches, op_names
from torch_dipu.runtime import DeviceRuntime, Kernel, UnsupportedDtypeError
from torch_dipu.vendors.droplet.faults import Fault, inject, parse_faults
from torch_dipu.vendors.droplet.traits import DropletTraits


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """Round float32 to TF32 (10 mantissa bits), as a tensor core does with its inputs."""
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0x1000) & ~0x1FFF
    return rounded.view(torch.float32).view(t.shape)


def _lower_precision(kernel: Kernel, precision: str) -> Kernel:
    to_low = _round_tf32 if precision == "high" else (lambda t: t.to(torch.bfloat16).to(torch.float32))

    def matmul(op: Any, *args: Any, **kwargs: Any) -> Any:
        args = tuple(to_low(a) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args)
        return kernel(op, *args, **kwargs)

    return matmul


def _dtype_checked(kernel: Kernel, unsupported: frozenset[torch.dtype], op_name: str) -> Kernel:
    def check(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            # 0-dim tensors may be host scalars (``x + torch.tensor(1.0, dtype=torch.float64)``), which
            # a device takes as a number.
            if value.dtype in unsupported and value.dim():
                raise UnsupportedDtypeError(
                    f"droplet: aten.{op_name} does not support {value.dtype} on this device "
                    f"(DROPLET_UNSUPPORTED_DTYPES); cast to a supported dtype or add the operator to "
                    f"DIPU_FORCE_FALLBACK_OPS_LIST"
                )
        elif isinstance(value, torch.dtype):
            if value in unsupported:
                raise UnsupportedDtypeError(
                    f"droplet: aten.{op_name} cannot produce {value}: unsupported on this device"
                )
        elif isinstance(value, (list, tuple)):
            for v in value:
                check(v)

    def checked(op: Any, *args: Any, **kwargs: Any) -> Any:
        check(args)
        check(tuple(kwargs.values()))
        return kernel(op, *args, **kwargs)

    return checked


class DropletRuntime(DeviceRuntime):
    """A simulated accelerator: memory is host RAM, kernels are the DIOPI reference implementation."""

    name = "droplet"

    def __init__(self, traits: DropletTraits, faults: list[Fault]) -> None:
        self.traits = traits
        self.faults = faults
        self._listeners: list[Callable[[], None]] = []

    # -- DeviceRuntime --------------------------------------------------------------------------------
    def device_count(self) -> int:
        return self.traits.device_count

    def memory_capacity(self, index: int) -> int:
        return self.traits.memory_capacity

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

    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        kernel: Kernel = fn.reference
        if "matmul" in fn.tags and self.traits.matmul_precision != "highest":
            kernel = _lower_precision(kernel, self.traits.matmul_precision)
        for fault in self.faults:
            if matches([fault.regex], op):
                kernel = inject(kernel, fault, op)
        if self.traits.unsupported_dtypes:
            kernel = _dtype_checked(kernel, self.traits.unsupported_dtypes, op_names(op)[0])
        return kernel

    def on_config_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    # -- switches -------------------------------------------------------------------------------------
    def reconfigure(self, **changes: Any) -> None:
        """Change traits (``device_count``, ``memory_capacity``, ``unsupported_dtypes``,
        ``matmul_precision``) and/or ``faults``; kernels are re-selected on the next call."""
        faults = changes.pop("faults", None)
        new_faults = self.faults if faults is None else (
            parse_faults(faults, "droplet faults") if isinstance(faults, str) else list(faults)
        )
        switches = {f.name for f in dataclasses.fields(self.traits)}
        for key in changes:
            if key not in switches:
                raise ValueError(f"droplet has no switch {key!r} (switches: faults, {', '.join(sorted(switches))})")
        if "unsupported_dtypes" in changes:
            changes["unsupported_dtypes"] = frozenset(changes["unsupported_dtypes"])
        new_traits = dataclasses.replace(self.traits, **changes)
        new_traits.validate()  # nothing changes unless every switch is valid
        self.traits, self.faults = new_traits, new_faults
        for listener in self._listeners:
            listener()
