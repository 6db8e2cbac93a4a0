"""Other libraries' operators with a kernel for the dipu device (registered on the PrivateUse1 key).

A library may register a kernel for its own operator on PrivateUse1, e.g.
``torch.library.Library("mylib", "DEF").impl("fused", fused_on_device, "PrivateUse1")``. A C++ backend's
tensors reach that kernel once the autograd keys have run (or were skipped, as under ``torch.inference_mode()``).
dipu tensors carry the Python key, which comes before the backend keys, so the call reaches
``DipuTensor.__torch_dispatch__`` instead. For such an operator the handler built here calls the PrivateUse1
kernel with the dipu tensors as they are, exactly as a C++ backend would run it; every other operator keeps
torch_dipu's own route (:mod:`torch_dipu.kernels`). The check runs once per operator, when its handler is built.

ATen's operators never take this route: torch_dipu's own PrivateUse1 kernels for them (torch_dipu.factories)
serve calls that never reach ``__torch_dispatch__``. Nor do the collectives (``c10d::``), which PyTorch registers
on PrivateUse1 itself: torch_dipu.dispatch hands them to torch_dipu.dicl before asking this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_KEY_NAME = "PrivateUse1"
_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


def has_device_kernel(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` is a non-ATen operator with a kernel registered on PrivateUse1 (not a fallback or an
    alias key such as CompositeExplicitAutograd)."""
    return func.namespace != "aten" and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _KEY_NAME)


def build_handler(func: torch._ops.OpOverload) -> Callable[[tuple, dict | None], Any]:
    """The handler that runs ``func``'s PrivateUse1 kernel on the dipu tensors themselves."""
    redispatch = func.redispatch

    def handler(args: tuple, kwargs: dict | None) -> Any:
        if kwargs:
            return redispatch(_KEYSET, *args, **kwargs)
        return redispatch(_KEYSET, *args)

    return handler


__all__ = ["build_handler", "has_device_kernel"]
