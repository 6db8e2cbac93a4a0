"""The one object holding torch_dipu's process state: vendor runtime, configuration, memory, RNG."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from torch_dipu.config import DipuConfig
from torch_dipu.memory import MemoryTracker
from torch_dipu.runtime import DeviceRuntime


@dataclass
class DipuState:
    runtime: DeviceRuntime
    config: DipuConfig
    memory: MemoryTracker
    generators: list[torch.Generator]
    current_device: int = 0
    #: Set once a device other than dipu:0 is used; only then do operators check their devices agree.
    several_devices: bool = False
    fallback_ops: set[str] = field(default_factory=set)
    force_fallback_patterns: list[re.Pattern[str]] = field(default_factory=list)

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("dipu", self.current_device if index is None else index)

    def device_index(self, device: torch.device | str | int | None) -> int:
        """The index ``device`` names (None or a bare "dipu": the current device), range-checked."""
        if device is None:
            return self.current_device
        if isinstance(device, int):
            index = device
        else:
            device = torch.device(device)
            if device.type != "dipu":
                raise ValueError(f"expected a dipu device, got {device}")
            index = self.current_device if device.index is None else device.index
        count = self.runtime.device_count()
        if not 0 <= index < count:
            raise RuntimeError(f"invalid device dipu:{index}: {self.runtime.name} has {count} device(s)")
        if index:
            self.several_devices = True
        return index


_STATE: DipuState | None = None


def get_state() -> DipuState:
    """The active torch_dipu state (torch_dipu must have been imported)."""
    if _STATE is None:
        raise RuntimeError("torch_dipu is not initialized: `import torch_dipu` first")
    return _STATE


def set_state(state: DipuState) -> None:
    global _STATE
    _STATE = state
