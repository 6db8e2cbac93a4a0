"""Memory helpers shared by the allocator, the memory checker and messages (see torch_dipu.allocator)."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """Human-readable size, as CUDA's out-of-memory messages print it."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "bytes" else f"{int(n)} bytes"
        n /= 1024
    raise AssertionError("unreachable")
