"""``DITORCH_SHOW_DEVICE_AS_CUDA=1``: ``tensor.device`` of the adapter's tensors reads as ``cuda:N``.

For user code that tests ``t.device.type == "cuda"``. Cost: ``Tensor.device`` becomes a Python property, so
every ``.device`` access anywhere (PyTorch's Python code included) runs a Python function and looks at the
caller's module (measured: 1.0 us instead of 0.11 us per access; docs/ditorch.md). PyTorch itself, the
vendor plugin and ditorch keep seeing the real device (they dispatch on it); other callers see cuda. Off by
default.
"""

from __future__ import annotations

import sys

import torch

from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True


def install(patches: Patches, device_type: str, framework: str) -> None:
    get_device = torch._C.TensorBase.device.__get__
    internal = ("torch", framework, "ditorch")
    prefixes = tuple(p + "." for p in internal)
    getframe = sys._getframe
    cuda = torch.device

    def device(self: torch.Tensor) -> torch.device:
        real = get_device(self)
        if real.type != device_type:
            return real
        caller = getframe(1).f_globals.get("__name__", "")
        if caller in internal or caller.startswith(prefixes):
            return real
        return cuda("cuda", real.index)

    patches.set(torch.Tensor, "device", property(device, doc="The tensor's device (the adapter's shown as cuda)."))
