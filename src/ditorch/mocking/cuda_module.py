"""``torch.cuda`` answers for the adapter's device; autocast and GradScaler accept ``"cuda"``.

The attributes of the real ``torch.cuda`` module and its submodules are replaced in place
(:mod:`.cuda_surface` says by what), so code holding ``torch.cuda`` and ``torch.cuda``'s own helpers that call
these names both see the vendor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import torch.amp
import torch.amp.autocast_mode
import torch.amp.grad_scaler
import torch.cuda

from ditorch.mocking import cuda_surface
from ditorch.mocking.device_strings import Translator
from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True


def install(patches: Patches, module: ModuleType, tr: Translator, vendor_name: str) -> None:
    """Map ``torch.cuda`` (every public name, see :mod:`.cuda_surface`) and the amp entry points."""
    cuda_surface.install(patches, module, tr, vendor_name)
    _install_amp(patches, tr)


def _install_amp(patches: Patches, tr: Translator) -> None:
    autocast_cls = torch.amp.autocast_mode.autocast
    autocast_init = autocast_cls.__init__

    @functools.wraps(autocast_init)
    def autocast_init_(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        autocast_init(self, tr.device_type_name(device_type), *args, **kwargs)

    # torch.cuda.amp.autocast calls super().__init__("cuda", ...): it lands here too.
    patches.set(autocast_cls, "__init__", autocast_init_)

    scaler_cls = torch.amp.grad_scaler.GradScaler
    scaler_init = scaler_cls.__init__

    @functools.wraps(scaler_init)
    def scaler_init_(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        scaler_init(self, tr.device_type_name(device), *args, **kwargs)

    # torch.cuda.amp.GradScaler() calls super().__init__("cuda", ...).
    patches.set(scaler_cls, "__init__", scaler_init_)

    for owner, name, default_cuda in (
        (torch, "is_autocast_enabled", True), (torch, "get_autocast_dtype", False),
        (torch, "set_autocast_enabled", False), (torch, "set_autocast_dtype", False),
        (torch.amp, "is_autocast_available", False), (torch.amp.autocast_mode, "is_autocast_available", False),
        (torch.amp, "custom_fwd", False), (torch.amp, "custom_bwd", False),
    ):
        fn = getattr(owner, name, None)
        if fn is not None:
            patches.set(owner, name, _device_type_argument(fn, tr, default_cuda))


def _device_type_argument(fn: Callable[..., Any], tr: Translator, default_cuda: bool) -> Callable[..., Any]:
    """``fn`` with its device type (first positional or ``device_type=``) translated from ``"cuda"``;
    ``default_cuda``: called without one, ``fn`` asks about cuda (``torch.is_autocast_enabled()``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (tr.device_type_name(args[0]), *args[1:])  # custom_fwd(fn, ...): fn passes through
        elif default_cuda and "device_type" not in kwargs:
            args = (tr.device_type,)
        if "device_type" in kwargs:
            kwargs["device_type"] = tr.device_type_name(kwargs["device_type"])
        return fn(*args, **kwargs)

    return call
