"""The generic adapter: any PrivateUse1 plugin, found without an adapter of its own.

A vendor plugin that renamed PrivateUse1 and registered its device module (``torch.<device_type>``) is usable by
ditorch as it is: everything ditorch needs is derived from the module and from PyTorch's device-generic APIs
(``torch.accelerator``, ``torch.Stream``, ``torch.Event``). Detection adds a :class:`GenericAdapter` for the plugin
holding PrivateUse1 (loaded by PyTorch's backend autoload on ``import torch``, or imported by the user before
``import ditorch``, or named by ``DITORCH_VENDOR``) unless an explicit adapter already covers its device type;
it ranks below every explicit adapter (:data:`PRIORITY`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import torch

from diopi.privateuse1 import Holder
from ditorch.adapters.base import Adapter

#: Detection order of the generic adapter: after every explicit one.
PRIORITY = 1000


@dataclass(frozen=True)
class GenericAdapter(Adapter):
    """A PrivateUse1 plugin with no adapter: ``name`` and ``device_type`` are its device type, ``framework`` its
    package; ``how`` says how it was found (``ditorch info`` prints it)."""

    how: str = ""

    @property
    def is_generic(self) -> bool:
        return True

    def describe(self) -> str:
        return self.how

    def is_present(self) -> bool:
        return True  # it holds PrivateUse1: its package is imported already

    def import_framework(self) -> ModuleType:
        return importlib.import_module(self.framework) if self.framework != self.device_type else torch

    def device_module(self) -> ModuleType:
        module = getattr(torch, self.device_type, None)
        if not isinstance(module, ModuleType):
            raise RuntimeError(f"{self.framework} renamed PrivateUse1 to {self.device_type!r} but registered no "
                               f"device module (torch._register_device_module)")
        return module


def collective_backend(device_type: str) -> str:
    """The ``torch.distributed`` backend the plugin registered for its device, else ``gloo`` (collectives on CPU
    copies of the device tensors, as for any device without one)."""
    try:
        import torch.distributed as dist

        return dist.Backend.default_device_backend_map.get(device_type, "gloo") if dist.is_available() else "gloo"
    except (ImportError, AttributeError):
        return "gloo"


def adapter_for(held: Holder) -> GenericAdapter:
    """The generic adapter of the plugin holding PrivateUse1."""
    how = f"generic: PrivateUse1 backend {held.device_type!r} of {held.plugin}"
    if held.autoload_entry is not None:
        how += f", loaded by PyTorch's backend autoload (torch.backends entry point {held.autoload_entry!r})"
    return GenericAdapter(name=held.device_type, framework=held.package or held.device_type,
                          device_type=held.device_type, dist_backend=collective_backend(held.device_type),
                          priority=PRIORITY, how=how)
