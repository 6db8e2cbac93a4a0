"""Best-device selection: a native accelerator if PyTorch has one, else the dipu device, else the CPU."""

from __future__ import annotations

import importlib

import torch

DIPU = "dipu"


def _load_dipu() -> bool:
    """Import torch_dipu (registers the ``dipu`` device); False when it is not installed."""
    try:
        importlib.import_module("torch_dipu")
    except ImportError:
        return False
    return True


def native_accelerator() -> torch.device | None:
    """The accelerator PyTorch already knows about (CUDA, XPU, MPS, ... or an imported PrivateUse1 device)."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    try:
        return accelerator.current_accelerator(check_available=True)
    except TypeError:  # older signature without check_available
        return accelerator.current_accelerator()


def best_device(requested: str | torch.device | None = None) -> torch.device:
    """The device to run on.

    ``requested`` (``"cpu"``, ``"dipu"``, ``"dipu:1"``, ...) wins when given; a dipu request imports
    torch_dipu. Otherwise: a native accelerator if ``torch.accelerator`` reports one, else dipu (importing
    torch_dipu) if it has a visible device, else the CPU.
    """
    if requested is not None:
        if str(requested).split(":", 1)[0] == DIPU and not _load_dipu():
            raise RuntimeError(f"device {str(requested)!r} needs torch_dipu, which is not installed")
        return torch.device(requested)
    native = native_accelerator()
    if native is not None:
        return native
    if _load_dipu() and torch.dipu.is_available():  # DIPU_VISIBLE_DEVICES may hide every device
        return torch.device(DIPU)
    return torch.device("cpu")
