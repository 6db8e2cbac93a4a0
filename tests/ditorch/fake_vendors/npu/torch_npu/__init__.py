"""A test-only stand-in for Huawei's torch_npu: registers a pure-Python ``npu`` device (no operators)."""

import sys

import torch

from torch_npu import npu

__version__ = "2.1.0.fake"


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self, _device_type=torch._C._autograd.DeviceType.PrivateUse1):
        return _device_type


_KEEPALIVE = [_Hooks(), _Guard()]  # C++ keeps raw pointers to them

torch.utils.rename_privateuse1_backend("npu")
torch._register_device_module("npu", npu)
sys.modules.setdefault("torch.npu", npu)
torch._C._acc.register_python_privateuseone_hook(_KEEPALIVE[0])
torch._C._acc.register_python_privateuseone_device_guard(_KEEPALIVE[1])
torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=False)
