"""The adapter interface: how ditorch recognises and uses one vendor's PyTorch plugin.

Adapters are published as entry points in the group ``ditorch.adapters`` (built-ins included), each
naming a zero-argument callable that returns an :class:`Adapter`. Everything vendor-specific lives in
an adapter; the rest of ditorch asks the active adapter and never tests a vendor name.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType

import torch

from diopi.privateuse1 import accelerator_serves


@dataclass(frozen=True)
class Adapter:
    """One vendor plugin.

    ``name`` is what ``DITORCH_VENDOR`` selects (``npu``, ``mlu``, ``musa``, ``dipu``, ``biren``,
    ``cuda``, ``xpu``, ``mps``); ``framework`` the module to import (``torch_npu``; ``torch`` for
    backends built into PyTorch); ``device_type`` the torch device type it provides (``npu``);
    ``dist_backend`` the ``torch.distributed`` backend that replaces ``"nccl"`` (``hccl``, ``cncl``,
    ``mccl``, ``gloo``); ``priority`` orders detection (lower first, then by name);
    ``visible_devices_env`` the plugin's own counterpart of ``CUDA_VISIBLE_DEVICES``
    (``ASCEND_RT_VISIBLE_DEVICES``), which ditorch fills from ``CUDA_VISIBLE_DEVICES`` before importing the
    plugin (None: the plugin has none, or reads ``CUDA_VISIBLE_DEVICES`` itself).
    """

    name: str
    framework: str
    device_type: str
    dist_backend: str
    priority: int = 100
    visible_devices_env: str | None = None

    @property
    def is_native(self) -> bool:
        """A backend built into PyTorch (cuda, xpu, mps): nothing to import, nothing to mock."""
        return self.framework == "torch"

    @property
    def is_generic(self) -> bool:
        """Found without an adapter of its own (:mod:`ditorch.adapters.generic`)."""
        return False

    @property
    def uses_privateuse1(self) -> bool:
        """Its plugin registers its device as PyTorch's PrivateUse1 backend (every plugin outside PyTorch does):
        it cannot load while another plugin holds PrivateUse1."""
        return not self.is_native

    def describe(self) -> str:
        """How ditorch knows this plugin: ``adapter <name>``, or the generic adapter's account."""
        return f"adapter {self.name}"

    def is_present(self) -> bool:
        """Whether the plugin is installed (importable), without importing it."""
        return self.is_native or importlib.util.find_spec(self.framework) is not None

    def import_framework(self) -> ModuleType:
        """Import the plugin (registers its device with PyTorch); errors propagate to the caller."""
        return importlib.import_module(self.framework)

    def device_module(self) -> ModuleType:
        """``torch.<device_type>``, the plugin's counterpart of ``torch.cuda``."""
        return getattr(torch, self.device_type)

    def is_available(self) -> bool:
        """At least one device of this kind can be used now (call after :meth:`import_framework`): the device
        module's ``is_available``/``device_count``, or ``torch.accelerator``'s where the module lacks them."""
        module = getattr(torch, self.device_type, None)
        if module is None:
            return False
        generic = accelerator_serves(self.device_type)
        available = getattr(module, "is_available", None)
        count = getattr(module, "device_count", None)
        if available is None and count is None and not generic:
            return False
        ok = available() if available is not None else torch.accelerator.is_available()
        return bool(ok and (count() if count is not None else torch.accelerator.device_count()) > 0)

    def version(self) -> str:
        """The plugin's version (``torch_npu.__version__``, else its distribution's; torch's for native backends)."""
        module = torch if self.is_native else importlib.import_module(self.framework)
        version = getattr(module, "__version__", None)
        if version is None:
            for dist in metadata.packages_distributions().get(self.framework, []):
                try:
                    return metadata.version(dist)
                except metadata.PackageNotFoundError:
                    continue
        return str(version or "unknown")

    def arch(self) -> str:
        """A short description of device 0 (its name), or the device type when it has none."""
        try:
            return str(self.device_module().get_device_name(0))
        except Exception:  # noqa: BLE001  (a plugin without get_device_name, or no device)
            return self.device_type
