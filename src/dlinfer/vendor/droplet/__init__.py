"""droplet's dlinfer kernels (dipu tensors); registered through the ``dlinfer.vendors`` entry point."""

from __future__ import annotations

from dlinfer.registry import KernelRegistry


def register(registry: KernelRegistry) -> None:
    """Register droplet's kernels for ``dipu`` tensors (none yet: the reference kernels serve)."""
