"""``torch.profiler`` with ``ProfilerActivity.CUDA`` profiles the vendor's device.

On a PyTorch without CUDA, the CUDA activity makes kineto print a C++ backtrace for every operator ("Failed to
record CUDA event") and slows the run many times over. Under the mapping the CUDA activity becomes the vendor
device's own activity (``PrivateUse1`` for plugin devices, ``XPU`` for xpu, ...) when the profiler supports it,
and is otherwise dropped with one warning. The same holds for ``torch.autograd.profiler.profile(use_cuda=True)``
and ``use_device="cuda"``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from typing import Any

import torch
import torch.autograd.profiler
import torch.profiler.profiler
from torch.profiler import ProfilerActivity

from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True


def vendor_activity(device_type: str) -> ProfilerActivity | None:
    """The profiler activity that traces ``device_type``, if this PyTorch's profiler supports one."""
    if device_type == torch._C._get_privateuse1_backend_name():
        activity = ProfilerActivity.PrivateUse1
    else:
        activity = getattr(ProfilerActivity, device_type.upper(), None)
    return activity if activity is not None and activity in torch.profiler.supported_activities() else None


class _Translation:
    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.activity = vendor_activity(device_type)
        self.warned = False

    def dropped(self) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(f"ditorch: the profiler cannot trace {self.device_type} kernels; ProfilerActivity.CUDA "
                          "is dropped (CPU activity, operator names, shapes and memory are still recorded)",
                          stacklevel=4)

    def activities(self, activities: Iterable[Any]) -> list[Any]:
        out: list[Any] = []
        for item in activities:
            if isinstance(item, dict):
                mapped = {self.one(k): v for k, v in item.items()}
                mapped.pop(None, None)
                if mapped:
                    out.append(mapped)
            elif (one := self.one(item)) is not None and one not in out:
                out.append(one)
        return out

    def one(self, activity: Any) -> Any:
        if activity != ProfilerActivity.CUDA:
            return activity
        if self.activity is None:
            self.dropped()
        return self.activity


def install(patches: Patches, device_type: str) -> None:
    translation = _Translation(device_type)
    kineto = torch.profiler.profiler._KinetoProfile
    kineto_init = kineto.__init__

    @functools.wraps(kineto_init)
    def init(self: Any, *args: Any, activities: Iterable[Any] | None = None, **kwargs: Any) -> None:
        if activities is not None:
            activities = translation.activities(activities) or [ProfilerActivity.CPU]
        kineto_init(self, *args, activities=activities, **kwargs)

    patches.set(kineto, "__init__", init)

    legacy = torch.autograd.profiler.profile
    legacy_init = legacy.__init__

    @functools.wraps(legacy_init)
    def legacy_init_(self: Any, *args: Any, use_cuda: bool = False, use_device: str | None = None,
                     **kwargs: Any) -> None:
        if use_cuda or use_device == "cuda":
            use_cuda = False
            if translation.activity is None:
                translation.dropped()
                use_device = None
            else:
                use_device = device_type
        legacy_init(self, *args, use_cuda=use_cuda, use_device=use_device, **kwargs)

    patches.set(legacy, "__init__", legacy_init_)
