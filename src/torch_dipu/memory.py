"""Device memory accounting: bytes held by live dipu storages, peaks, and the capacity check."""

from __future__ import annotations

import weakref

import torch


def format_bytes(n: float) -> str:
    """Human-readable size, as CUDA's out-of-memory messages print it."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "bytes" else f"{int(n)} bytes"
        n /= 1024
    raise AssertionError("unreachable")


class MemoryTracker:
    """Counts the bytes of every storage that backs a dipu tensor, per device, until the storage dies.

    Storages are recognised by their Python object, which PyTorch keeps for the storage's lifetime;
    a weak reference callback releases the bytes when the last tensor using a storage is gone.
    """

    def __init__(self, device_count: int, capacity: list[int], vendor: str) -> None:
        self.capacity = capacity
        self.vendor = vendor
        self.allocated = [0] * device_count
        self.peak = [0] * device_count
        self.alloc_count = [0] * device_count
        self.free_count = [0] * device_count
        self._live: dict[int, tuple[weakref.ref, int, int]] = {}

    def resize(self, capacity: list[int]) -> None:
        """Set the capacity of devices ``0..len(capacity)-1`` (the device count may have changed). Tables
        only grow: a device that goes away keeps its figures, and its storages are released as they die."""
        count = len(capacity)
        for table in (self.allocated, self.peak, self.alloc_count, self.free_count):
            table.extend([0] * (count - len(table)))
        self.capacity = list(capacity) + self.capacity[count:]

    def track(self, raw: torch.Tensor, index: int) -> None:
        """Account the storage of ``raw`` on device ``index`` unless it is already accounted."""
        storage = raw.untyped_storage()
        key = id(storage)
        if key in self._live:
            return
        nbytes = storage.nbytes()
        self._live[key] = (weakref.ref(storage, lambda _ref, key=key: self._release(key)), nbytes, index)
        total = self.allocated[index] + nbytes
        self.allocated[index] = total
        self.alloc_count[index] += 1
        if total > self.peak[index]:
            self.peak[index] = total
        if total > self.capacity[index]:
            raise self.out_of_memory(nbytes, index, already_allocated=True)

    def resized(self, raw: torch.Tensor, index: int) -> None:
        """Re-account the storage of ``raw`` after it was resized in place."""
        storage = raw.untyped_storage()
        entry = self._live.get(id(storage))
        if entry is None:
            self.track(raw, index)
            return
        ref, old, _ = entry
        new = storage.nbytes()
        self._live[id(storage)] = (ref, new, index)
        self.allocated[index] += new - old
        self.peak[index] = max(self.peak[index], self.allocated[index])
        if self.allocated[index] > self.capacity[index]:
            raise self.out_of_memory(new - old, index, already_allocated=True)

    def _release(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            _, nbytes, index = entry
            self.allocated[index] -= nbytes
            self.free_count[index] += 1

    def check(self, nbytes: int, index: int) -> None:
        """Raise ``torch.OutOfMemoryError`` if ``nbytes`` more would not fit on device ``index``."""
        if self.allocated[index] + nbytes > self.capacity[index]:
            raise self.out_of_memory(nbytes, index)

    def out_of_memory(self, nbytes: int, index: int, already_allocated: bool = False) -> torch.OutOfMemoryError:
        used = self.allocated[index] - (nbytes if already_allocated else 0)
        free = max(self.capacity[index] - used, 0)
        return torch.OutOfMemoryError(
            f"DIPU out of memory. Tried to allocate {format_bytes(nbytes)}. Device dipu:{index} ({self.vendor}) "
            f"has a total capacity of {format_bytes(self.capacity[index])} of which {format_bytes(free)} is free. "
            f"Of the allocated memory {format_bytes(used)} is allocated by PyTorch. "
            "Reduce the batch size or raise the device capacity (DROPLET_MEMORY_CAPACITY for droplet)."
        )

    def reset_peak(self, index: int) -> None:
        self.peak[index] = self.allocated[index]

    def stats(self, index: int) -> dict[str, int]:
        """A subset of ``torch.cuda.memory_stats`` keys, with the same names."""
        return {
            "allocated_bytes.all.current": self.allocated[index],
            "allocated_bytes.all.peak": self.peak[index],
            "allocation.all.allocated": self.alloc_count[index],
            "allocation.all.freed": self.free_count[index],
            "reserved_bytes.all.current": self.allocated[index],
            "reserved_bytes.all.peak": self.peak[index],
        }
