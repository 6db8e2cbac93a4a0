"""droplet's dlinfer kernels for ``dipu`` tensors, registered through the ``dlinfer.vendors`` entry point.

They are registered only when torch_dipu's active vendor is droplet (``torch_dipu.runtime().name``); each goes
through the DIOPI fused function of its operator (``torch.ops.diopi.*``, which on dipu tensors runs droplet's
DIOPI kernel, faults included) and hands the argument forms that function lacks to the reference kernel.
"""

from __future__ import annotations

import os
import sys

from dlinfer.registry import KernelRegistry

__all__ = ["DEVICE_TYPE", "NAME", "register"]

NAME = "droplet"
DEVICE_TYPE = "dipu"


def _droplet_active() -> bool:
    """Whether torch_dipu runs (or, once imported, will run) on droplet."""
    if "torch_dipu" not in sys.modules and (os.environ.get("DIPU_DEVICE", "").strip() or NAME) != NAME:
        return False  # another vendor is configured: do not import torch_dipu for it
    import torch_dipu

    return torch_dipu.runtime().name == NAME


def register(registry: KernelRegistry) -> None:
    """Register droplet's kernels for ``dipu`` tensors when droplet is torch_dipu's active vendor."""
    if not _droplet_active():
        return
    from . import kernels

    for op, fn in kernels.KERNELS.items():
        registry.register(op, device_type=DEVICE_TYPE, name=NAME)(fn)
