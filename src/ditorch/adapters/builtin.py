"""The built-in adapters, published as entry points in the group ``ditorch.adapters`` (pyproject.toml).

Priority orders detection (lower first): vendor plugins, then PyTorch's native backends, then dipu.
torch_dipu is always installed with ditorch, so it comes last among real devices and never shadows a
vendor's own plugin. Nothing available means the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ditorch.adapters.base import Adapter


@dataclass(frozen=True)
class NativeAdapter(Adapter):
    """A backend built into PyTorch. Availability is asked of PyTorch's C layer, not of ``torch.cuda``'s
    Python functions, which the mocking replaces with the vendor's (so detecting again stays honest)."""

    def is_available(self) -> bool:
        if self.device_type == "mps":
            return bool(torch.backends.mps.is_available())
        count = getattr(torch._C, f"_{self.device_type}_getDeviceCount", None)
        return count is not None and count() > 0


def npu() -> Adapter:
    """Huawei Ascend: torch_npu registers ``npu``; collectives are HCCL."""
    return Adapter(name="npu", framework="torch_npu", device_type="npu", dist_backend="hccl", priority=10,
                   visible_devices_env="ASCEND_RT_VISIBLE_DEVICES")


def mlu() -> Adapter:
    """Cambricon: torch_mlu registers ``mlu``; collectives are CNCL."""
    return Adapter(name="mlu", framework="torch_mlu", device_type="mlu", dist_backend="cncl", priority=20,
                   visible_devices_env="MLU_VISIBLE_DEVICES")


def musa() -> Adapter:
    """Moore Threads: torch_musa registers ``musa``; collectives are MCCL."""
    return Adapter(name="musa", framework="torch_musa", device_type="musa", dist_backend="mccl", priority=30,
                   visible_devices_env="MUSA_VISIBLE_DEVICES")


def biren() -> Adapter:
    """Biren: torch_br registers ``supa`` (``torch.supa``); collectives are BCCL."""
    return Adapter(name="biren", framework="torch_br", device_type="supa", dist_backend="bccl", priority=40,
                   visible_devices_env="SUPA_VISIBLE_DEVICES")


def cuda() -> Adapter:
    """PyTorch's own CUDA (or ROCm) backend: nothing to import, nothing to mock."""
    return NativeAdapter(name="cuda", framework="torch", device_type="cuda", dist_backend="nccl", priority=50)


def xpu() -> Adapter:
    """PyTorch's own Intel GPU backend; collectives are XCCL."""
    return NativeAdapter(name="xpu", framework="torch", device_type="xpu", dist_backend="xccl", priority=60)


def mps() -> Adapter:
    """PyTorch's own Apple GPU backend; no collective library of its own, so gloo."""
    return NativeAdapter(name="mps", framework="torch", device_type="mps", dist_backend="gloo", priority=70)


def dipu() -> Adapter:
    """torch_dipu's ``dipu`` device (droplet by default); collectives on torch_dipu's ``dicl`` backend."""
    return Adapter(name="dipu", framework="torch_dipu", device_type="dipu", dist_backend="dicl", priority=90,
                   visible_devices_env="DIPU_VISIBLE_DEVICES")


#: name -> factory, the same table as the entry points (used when package metadata is missing).
FACTORIES = {f.__name__: f for f in (npu, mlu, musa, biren, cuda, xpu, mps, dipu)}
