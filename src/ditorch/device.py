"""Best-device selection: a native accelerator if PyTorch has one, else the dipu device, else the CPU."""

from __future__ import annotations

import importlib

import torch

from diopi.env import ConfigError

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
    return torch.accelerator.current_accelerator(check_available=True)


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


def parse_device(text: str | torch.device, option: str = "--device") -> torch.device:
    """``text`` (``cpu``, ``dipu``, ``dipu:1``, ``cuda:0``, ...) as a device this process has, for a command's
    ``option``; :class:`~diopi.env.ConfigError` naming the option, the value and what exists otherwise: a device
    type PyTorch does not know here, one with no device, an index past the device count."""
    if isinstance(text, torch.device):
        device = text
    else:
        name = text.strip()
        if name.split(":", 1)[0] == DIPU and not _load_dipu():
            raise ConfigError(f"{option} {text!r}: the dipu device needs torch_dipu, which is not installed")
        try:
            device = torch.device(name)
        except (RuntimeError, ValueError):
            raise ConfigError(f"{option} {text!r}: not a device of this process (expected {_known_forms()})") from None
    if device.type in ("cpu", "meta"):
        return device
    try:
        count = int(torch.get_device_module(device.type).device_count())
    except Exception:  # noqa: BLE001  (a backend that cannot count its devices: leave it to the backend)
        return device
    plural = "device" if count == 1 else "devices"
    if count == 0:
        raise ConfigError(f"{option} {text!r}: this process has no {device.type} device (expected {_known_forms()})")
    if device.index is not None and device.index >= count:
        raise ConfigError(f"{option} {text!r}: there {'is' if count == 1 else 'are'} {count} {device.type} {plural} "
                          f"({device.type}:0" + (f" to {device.type}:{count - 1})" if count > 1 else ")"))
    return device


def _known_forms() -> str:
    """``cpu, dipu, dipu:N``: the device names this process can use, for messages."""
    accelerator = native_accelerator()
    if accelerator is None and _load_dipu() and torch.dipu.is_available():
        accelerator = torch.device(DIPU)
    if accelerator is None:
        return "cpu"
    return f"cpu, {accelerator.type}, {accelerator.type}:N"
