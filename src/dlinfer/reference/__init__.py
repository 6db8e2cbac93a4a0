"""The plain-torch reference kernel of every dlinfer operator; they run on any device with the ATen operators they
use. Importing this package records them all (``_table.KERNELS``) and registers them with the kernel registry.

``dlinfer.registry`` imports this package on its first lookup, so the kernel modules do not import the registry
back (the import graph stays acyclic): the registry calls :func:`register` with itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import activation, attention, kv_cache, linear, moe, norm, quant, rotary
from ._table import KERNELS

if TYPE_CHECKING:
    from dlinfer.registry import KernelRegistry

__all__ = ["KERNELS", "activation", "attention", "kv_cache", "linear", "moe", "norm", "quant", "register",
           "rotary"]


def register(registry: KernelRegistry) -> None:
    """Register every reference kernel with ``registry`` (``register_reference``)."""
    for op, fn in KERNELS.items():
        registry.register_reference(op)(fn)

