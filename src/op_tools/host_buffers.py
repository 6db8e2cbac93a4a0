"""Reused host buffers for captured data.

Every step captures tensors of the same sizes again; taking their host copies from buffers the writer has
finished with, instead of fresh allocations, saves the page faults (and the kernel's zeroing) of large
allocations: about a third of a capture's system time on the W1 step.
"""

from __future__ import annotations

import threading

import torch

__all__ = ["HostBufferPool"]


class HostBufferPool:
    """Buffers by (dtype, numel), at most ``max_bytes`` of them kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.kept_bytes = 0
        self._free: dict[tuple[torch.dtype, int], list[torch.Tensor]] = {}
        self._lock = threading.Lock()

    def take(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D host tensor of ``numel`` elements (contents undefined)."""
        with self._lock:
            free = self._free.get((dtype, numel))
            if free:
                buffer = free.pop()
                self.kept_bytes -= buffer.numel() * buffer.element_size()
                return buffer
        return torch.empty(numel, dtype=dtype)

    def give(self, buffers: list[torch.Tensor]) -> None:
        """Return buffers nobody uses any more."""
        with self._lock:
            for buffer in buffers:
                nbytes = buffer.numel() * buffer.element_size()
                if nbytes == 0 or self.kept_bytes + nbytes > self.max_bytes:
                    continue
                self._free.setdefault((buffer.dtype, buffer.numel()), []).append(buffer)
                self.kept_bytes += nbytes

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self.kept_bytes = 0
