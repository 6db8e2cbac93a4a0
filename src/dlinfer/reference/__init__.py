"""The plain-torch reference kernel of every dlinfer operator; they run on any device with the ATen operators they
use. Each kernel module registers its kernels with the kernel registry as it is imported (``@reference("op")``, the
registry's :meth:`~dlinfer.registry.KernelRegistry.register_reference`); ``import dlinfer`` imports them all.
"""

from __future__ import annotations

from . import activation, attention, kv_cache, linear, moe, norm, quant, rotary

__all__ = ["activation", "attention", "kv_cache", "linear", "moe", "norm", "quant", "rotary"]
