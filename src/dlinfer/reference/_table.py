"""The reference kernels' table: ``@reference("op")`` records a kernel here; :func:`dlinfer.reference.register`
hands the table to the kernel registry. (The kernel modules do not import ``dlinfer.registry``: the registry
imports this package, and the import graph must stay acyclic.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["KERNELS", "reference"]

Kernel = Callable[..., Any]

#: operator name -> reference kernel
KERNELS: dict[str, Kernel] = {}


def reference(op: str) -> Callable[[Kernel], Kernel]:
    """Decorator: ``fn`` is the reference kernel of ``op``."""

    def decorate(fn: Kernel) -> Kernel:
        KERNELS[op] = fn
        return fn

    return decorate
