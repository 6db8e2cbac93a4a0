"""Vendor kernels for dlinfer operators, one package per vendor, each registered through the ``dlinfer.vendors``
entry point group (a callable taking :class:`dlinfer.registry.KernelRegistry`).

``vendor_name`` (read lazily, ``from dlinfer.vendor import vendor_name``, as LMDeploy does) is the name of the
vendor whose kernels serve the current accelerator's device type, or ``"reference"`` when none registered any.
"""

from __future__ import annotations

from typing import Any

__all__ = ["current_vendor_name", "vendor_name"]


def current_vendor_name(device_type: str | None = None) -> str:
    """The vendor serving ``device_type`` (default: the current accelerator's, ``torch.accelerator``)."""
    from dlinfer.registry import registry

    if device_type is None:
        import torch

        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        device_type = acc.type if acc is not None else "cpu"
    return registry.vendor_for(device_type)


def __getattr__(name: str) -> Any:
    if name == "vendor_name":
        return current_vendor_name()
    raise AttributeError(f"module 'dlinfer.vendor' has no attribute {name!r}")
