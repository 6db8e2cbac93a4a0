"""Who holds PyTorch's PrivateUse1 backend in this process: the device name, the plugin, and how it got loaded.

PyTorch has one PrivateUse1 slot per process. A vendor plugin (torch_npu, torch_dipu, any out-of-tree backend)
renames it to its device type and registers ``torch.<device_type>``; a plugin that publishes a ``torch.backends``
entry point is loaded by PyTorch itself on ``import torch`` (backend autoload) before any user code runs.
Both torch_dipu (to refuse clearly when another plugin got there first) and ditorch (to find a plugin that has no
adapter) ask this module; it imports nothing of the project and has no side effects.
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass
from importlib import metadata

import torch

__all__ = ["AUTOLOAD_GROUP", "AUTOLOAD_SWITCH", "Holder", "accelerator_serves", "holder"]

#: The entry point group PyTorch's backend autoload reads on ``import torch``.
AUTOLOAD_GROUP = "torch.backends"
#: The variable that turns PyTorch's backend autoload off (``0``).
AUTOLOAD_SWITCH = "TORCH_DEVICE_BACKEND_AUTOLOAD"
_FREE = "privateuseone"


@dataclass(frozen=True)
class Holder:
    """The plugin holding PrivateUse1: its ``device_type`` (``torch._C._get_privateuse1_backend_name()``), its
    device ``module`` (``torch.<device_type>``, None when it registered none), ``package`` (the top-level package
    that defined that module, ``""`` when unknown) and ``autoload_entry`` (the ``torch.backends`` entry point that
    loaded it on ``import torch``, None when it was imported by code)."""

    device_type: str
    module: types.ModuleType | None
    package: str
    autoload_entry: str | None

    @property
    def plugin(self) -> str:
        """The plugin's name for messages: its package, else ``"the '<device>' plugin"``."""
        return self.package or f"the {self.device_type!r} plugin"

    def describe(self) -> str:
        """One phrase naming the plugin and how it was loaded, e.g. ``torch_x (device 'x', loaded on import torch
        by PyTorch's backend autoload, entry point 'torch_x' in torch.backends; TORCH_DEVICE_BACKEND_AUTOLOAD=0
        turns that off)``."""
        text = f"{self.plugin} (device {self.device_type!r}"
        if self.autoload_entry is not None:
            text += (f", loaded on import torch by PyTorch's backend autoload, entry point {self.autoload_entry!r} in "
                     f"{AUTOLOAD_GROUP}; {AUTOLOAD_SWITCH}=0 turns that off")
        return text + ")"


def _device_module(device_type: str) -> types.ModuleType | None:
    module = getattr(torch, device_type, None)
    return module if isinstance(module, types.ModuleType) else None


def _autoload_entry(package: str) -> str | None:
    if not package or os.environ.get(AUTOLOAD_SWITCH, "1") != "1":  # PyTorch's own test of the switch
        return None
    for ep in metadata.entry_points(group=AUTOLOAD_GROUP):
        if ep.value.split(":")[0].split(".")[0] == package:
            return ep.name
    return None


def holder() -> Holder | None:
    """The plugin holding PrivateUse1 now, or None while PrivateUse1 is free (not renamed)."""
    device_type = torch._C._get_privateuse1_backend_name()
    if device_type == _FREE:
        return None
    module = _device_module(device_type)
    package = module.__name__.partition(".")[0] if module is not None else ""
    if package == "torch":  # a module built by torch.utils.backend_registration, not the plugin's own
        package = ""
    return Holder(device_type, module, package, _autoload_entry(package))


def accelerator_serves(device_type: str) -> bool:
    """Whether PyTorch's device-generic API, ``torch.accelerator``, answers for ``device_type`` (it serves one
    accelerator per process: the PrivateUse1 plugin's, a built-in backend's, or none)."""
    current = torch.accelerator.current_accelerator()
    return current is not None and current.type == device_type
