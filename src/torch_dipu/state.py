"""The one object holding torch_dipu's process state: vendor runtime, configuration, memory, RNG."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from diopi.env import ConfigError
from diopi.op_names import CheckedOpList
from torch_dipu.allocator import CachingAllocator
from torch_dipu.config import VISIBLE_DEVICES, DipuConfig
from torch_dipu.runtime import DeviceRuntime


def _devices_text(count: int) -> str:
    """``1 device: 0``, ``4 devices: 0-3``, ``no device``."""
    if count == 0:
        return "no device"
    if count == 1:
        return "1 device: 0"
    return f"{count} devices: " + ("0, 1" if count == 2 else f"0-{count - 1}")


def resolve_visible(selection: list[int] | None, vendor_count: int, vendor: str,
                    text: str | None = None) -> list[int]:
    """The logical -> vendor device index map: ``selection`` (``DIPU_VISIBLE_DEVICES`` parsed; None: every
    device) checked against the vendor's ``vendor_count`` devices. An index the vendor lacks raises
    ``ValueError`` naming the variable."""
    if selection is None:
        return list(range(vendor_count))
    for index in selection:
        if index >= vendor_count:
            shown = ",".join(map(str, selection)) if text is None else text
            raise ConfigError(f"{VISIBLE_DEVICES}={shown!r}: device {index} does not exist "
                             f"({vendor} has {_devices_text(vendor_count)})")
    return list(selection)


@dataclass
class DipuState:
    runtime: DeviceRuntime
    config: DipuConfig
    #: The caching allocator (torch_dipu.allocator): blocks of every dipu storage, statistics, the cache.
    memory: CachingAllocator
    generators: list[torch.Generator]
    #: Logical -> vendor device index: ``dipu:i`` is the vendor's device ``physical[i]``
    #: (``DIPU_VISIBLE_DEVICES``; without it the identity over every vendor device).
    physical: list[int] = field(default_factory=list)
    current_device: int = 0
    #: Set once a device other than dipu:0 is used; only then do operators check their devices agree.
    several_devices: bool = False
    fallback_ops: set[str] = field(default_factory=set)
    #: ``DIPU_FORCE_FALLBACK_OPS_LIST`` as a checked list (torch_dipu.kernels.parse_fallback_list).
    force_fallback_patterns: CheckedOpList = field(default_factory=lambda: CheckedOpList([], "", frozenset))

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("dipu", self.current_device if index is None else index)

    def device_index(self, device: torch.device | str | int | None) -> int:
        """The index ``device`` names (None or a bare "dipu": the current device), range-checked."""
        if device is None:
            if self.physical:
                return self.current_device
            raise RuntimeError(self.no_device_message())
        if isinstance(device, int):
            index = device
        else:
            device = torch.device(device)
            if device.type != "dipu":
                raise ValueError(f"expected a dipu device, got {device}")
            index = self.current_device if device.index is None else device.index
        count = len(self.physical)
        if not 0 <= index < count:
            raise RuntimeError(self.no_device_message() if count == 0 else self.invalid_index_message(index))
        if index:
            self.several_devices = True
        return index

    # -- device count and visibility (DIPU_VISIBLE_DEVICES) -----------------------------------------------
    def device_count(self) -> int:
        """Number of dipu devices this process sees (the visible ones)."""
        return len(self.physical)

    def vendor_index(self, index: int) -> int:
        """The vendor runtime's index of ``dipu:index`` (every call into the runtime with a device goes
        through here)."""
        return self.physical[index]

    def _visibility(self) -> str:
        text = self.config.visible_devices_text
        return "" if self.config.visible_devices is None else f"{VISIBLE_DEVICES}={text!r}"

    def no_device_message(self) -> str:
        if self.config.visible_devices == []:
            return f"no dipu device is visible: {self._visibility()} hides every device"
        return f"no dipu device is available: {self.runtime.name} has no device"

    def invalid_index_message(self, index: int) -> str:
        count = len(self.physical)
        last = "dipu:0" if count == 1 else f"dipu:0-{count - 1}"
        if self.config.visible_devices is None:
            return f"invalid device dipu:{index}: {self.runtime.name} has {count} device{'s' * (count != 1)} ({last})"
        return (f"invalid device dipu:{index}: {count} device{'s are' if count != 1 else ' is'} visible ({last}; "
                f"{self._visibility()})")

    def sync_devices(self) -> None:
        """Rebuild the index map and the per-device memory tables from the vendor runtime (at import and
        whenever the vendor's switches change, e.g. droplet's device count). A current device that no
        longer exists becomes dipu:0."""
        self.physical = resolve_visible(self.config.visible_devices, self.runtime.device_count(),
                                        self.runtime.name, self.config.visible_devices_text)
        self.memory.resize([self.runtime.memory_capacity(p) for p in self.physical], self.physical)
        if self.current_device >= len(self.physical):
            self.current_device = 0


_STATE: DipuState | None = None


def get_state() -> DipuState:
    """The active torch_dipu state (torch_dipu must have been imported)."""
    if _STATE is None:
        raise RuntimeError("torch_dipu is not initialized: `import torch_dipu` first")
    return _STATE


def set_state(state: DipuState) -> None:
    global _STATE
    _STATE = state
