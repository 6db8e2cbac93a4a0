"""Which generator a device's random kernels draw from.

A plugin may run its random operators as CPU kernels on host copies (PyTorch's reference plugin does): they then
draw from the CPU's default generator, and the device module's own generator (``manual_seed``, ``get_rng_state``)
is never used. Tools that draw on the device's behalf (OpFallback) and ditorch's ``torch.cuda`` seeding both need
to know, so that they use the generator the device really uses.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["draws_from_cpu"]

_FOUND: dict[str, bool] = {}


def draws_from_cpu(device_type: str, index: int = 0, module: Any = None) -> bool:
    """Whether ``device_type``'s own random kernels draw from the CPU's default generator: found once per device
    type by one draw on the device (``uniform_`` of 8 elements, unseen by torch function modes), the CPU's and the
    device's generator states put back afterwards. A device with no random kernel, or none that answers, is taken
    to use its own generator."""
    known = _FOUND.get(device_type)
    if known is not None:
        return known
    module = module if module is not None else getattr(torch, device_type, None)
    cpu_state = torch.get_rng_state()
    try:
        device_state = module.get_rng_state(index) if hasattr(module, "get_rng_state") else None
    except Exception:  # noqa: BLE001  (a generator the plugin cannot read: nothing to put back)
        device_state = None
    try:
        with torch._C.DisableTorchFunction():  # the tools' interception never sees this draw
            torch.empty(8, device=torch.device(device_type, index)).uniform_()
        known = not torch.equal(torch.get_rng_state(), cpu_state)
    except Exception:  # noqa: BLE001  (no random kernel on the device: its generator is the one to draw from)
        known = False
    finally:
        torch.set_rng_state(cpu_state)
        if device_state is not None:
            module.set_rng_state(device_state, index)
    _FOUND[device_type] = known
    return known
