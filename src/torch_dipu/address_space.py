"""Bookkeeping of one device's address space: the default of ``DeviceRuntime.raw_malloc`` / ``raw_free``.

A vendor whose memory is host RAM (droplet) has no real device addresses; this hands out addresses in a
virtual range per device, and checks every free: a range must lie inside an earlier
allocation (any sub-range aligned to :data:`GRANULARITY` may be freed, as CUDA's expandable segments unmap
pages), and a double free or a free of an unknown address raises ``RuntimeError`` naming the address.
"""

from __future__ import annotations

import bisect

import torch

from torch_dipu.memory import format_bytes

#: Every size and address handed to ``raw_malloc`` / ``raw_free`` is a multiple of this (CUDA's block rounding).
GRANULARITY = 512
#: The first address of device ``i`` is ``(i + 1) * _DEVICE_STRIDE``: addresses tell devices apart.
_DEVICE_STRIDE = 1 << 44


class AddressSpace:
    """The allocated ranges of one device."""

    def __init__(self, index: int, vendor: str) -> None:
        self.index, self.vendor = index, vendor
        self.base = (index + 1) * _DEVICE_STRIDE
        self.used = 0
        self._starts: list[int] = []  # sorted starts of allocated ranges
        self._ends: dict[int, int] = {}  # start -> end of allocated ranges
        self._top = self.base  # lowest address never handed out

    def malloc(self, nbytes: int, capacity: int) -> int:
        """A new range of ``nbytes``; ``torch.OutOfMemoryError`` if ``capacity`` would be exceeded."""
        if nbytes <= 0 or nbytes % GRANULARITY:
            raise ValueError(f"{self.vendor}: raw_malloc of {nbytes} bytes: sizes are positive multiples of "
                             f"{GRANULARITY}")
        if self.used + nbytes > capacity:
            raise torch.OutOfMemoryError(
                f"{self.vendor}: device {self.index} cannot allocate {format_bytes(nbytes)} "
                f"({format_bytes(self.used)} of {format_bytes(capacity)} in use)")
        # Bump allocation (constant time); holes are searched only once the device's range is used up.
        address = self._top if self._top + nbytes <= self.base + _DEVICE_STRIDE else self._first_hole(nbytes)
        bisect.insort(self._starts, address)
        self._ends[address] = address + nbytes
        self._top = max(self._top, address + nbytes)
        self.used += nbytes
        return address

    def _first_hole(self, nbytes: int) -> int:
        previous_end = self.base
        for start in self._starts:
            if start - previous_end >= nbytes:
                return previous_end
            previous_end = self._ends[start]
        return previous_end

    def free(self, address: int, nbytes: int) -> None:
        """Release ``[address, address + nbytes)``, which must lie inside one allocated range."""
        pos = bisect.bisect_right(self._starts, address) - 1
        start = self._starts[pos] if pos >= 0 else None
        if start is None or address + nbytes > self._ends[start] or nbytes <= 0:
            raise RuntimeError(f"{self.vendor}: raw_free of address 0x{address:x} ({nbytes} bytes) on device "
                               f"{self.index}: not an allocated range (unknown address or double free)")
        if address % GRANULARITY or nbytes % GRANULARITY:
            raise ValueError(f"{self.vendor}: raw_free of address 0x{address:x} ({nbytes} bytes): address and size "
                             f"must be multiples of {GRANULARITY}")
        end = self._ends.pop(start)
        del self._starts[pos]
        if start < address:
            self._starts.insert(pos, start)
            self._ends[start] = address
            pos += 1
        if address + nbytes < end:
            self._starts.insert(pos, address + nbytes)
            self._ends[address + nbytes] = end
        self.used -= nbytes
        if not self._starts:
            self._top = self.base
