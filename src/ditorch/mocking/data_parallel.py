"""``nn.DataParallel`` under the mapping.

With the cuda mapping on, PyTorch takes the vendor's device for CUDA and builds ``DataParallel`` for ``cuda:0``,
then fails on the first forward ("module must have its parameters and buffers on device cuda:0 ... found
dipu:0"). Its scatter, replicate and gather are CUDA kernels, so over several devices it cannot run on a
vendor's device at all. ditorch makes it:

- over one device (the usual case: Trainer and scripts wrap whenever a GPU is there), a wrapper that moves the
  inputs to the device and calls the module, which is what ``DataParallel`` does with one device;
- over several devices, one clear error at construction that names the alternative, DistributedDataParallel.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import torch
from torch.nn.parallel import DataParallel
from torch.utils._pytree import tree_map_only

from ditorch.mocking.device_strings import Translator
from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True


def _to(obj: Any, device: torch.device) -> Any:
    """``obj`` (tensors in lists, tuples, dicts) with its tensors on ``device``."""
    return tree_map_only(torch.Tensor, lambda t: t.to(device), obj)


def install(patches: Patches, tr: Translator, vendor: str) -> None:
    init, forward = DataParallel.__init__, DataParallel.forward

    @functools.wraps(init)
    def init_(self: DataParallel, module: torch.nn.Module, device_ids: Any = None, output_device: Any = None,
              dim: int = 0) -> None:
        if device_ids is not None:
            device_ids = [tr.device(d) for d in device_ids]
        # PyTorch's default: every device when cuda is available (checked before PyTorch's own __init__, which
        # compares the devices' properties first)
        count = len(device_ids) if device_ids is not None else (tr.device_count() if torch.cuda.is_available() else 0)
        if count > 1:
            raise RuntimeError(
                f"nn.DataParallel over {count} {tr.device_type} devices is not supported on {vendor}: "
                "its scatter, replicate and gather are CUDA kernels. Use DistributedDataParallel, one process per "
                "device (torchrun --nproc-per-node N train.py; the 'nccl' backend is mapped to the vendor's), or "
                "run on one device (CUDA_VISIBLE_DEVICES=0, or device_ids=[0]), where DataParallel works.")
        init(self, module, device_ids, tr.device(output_device) if output_device is not None else None, dim)
        source = getattr(self, "src_device_obj", None)
        if source is None or source.type != "cuda":
            return
        self.src_device_obj = torch.device(tr.device_type, self.device_ids[0])
        self.module.to(self.src_device_obj)

    @functools.wraps(forward)
    def forward_(self: DataParallel, *inputs: Any, **kwargs: Any) -> Any:
        device = getattr(self, "src_device_obj", None)
        if not self.device_ids or device is None or device.type != tr.device_type:
            return forward(self, *inputs, **kwargs)
        return self.module(*_to(inputs, device), **_to(kwargs, device))

    data_parallel_module = importlib.import_module("torch.nn.parallel.data_parallel")  # the package has a function
    check_balance = data_parallel_module._check_balance

    @functools.wraps(check_balance)
    def check_balance_(device_ids: Any) -> None:
        if len(device_ids) > 1:  # one device is balanced by definition (PyTorch divides by its memory size)
            check_balance(device_ids)

    patches.set(data_parallel_module, "_check_balance", check_balance_)
    patches.set(DataParallel, "__init__", init_)
    patches.set(DataParallel, "forward", forward_)
