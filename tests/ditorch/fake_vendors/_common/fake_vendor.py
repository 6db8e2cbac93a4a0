"""Shared body of the test-only fake vendor plugins (torch_npu, torch_mlu, torch_musa, torch_br).

:func:`register` does what a real plugin does on import, in pure Python: it renames PrivateUse1 to the
vendor's device type, registers ``torch.<device>`` (the ``torch.cuda``-style queries, answered for
``count`` devices named ``name``), the hooks and device guard, the generated ``Tensor.<device>()``
methods, ``empty``/``empty_strided`` kernels that make storage-less tensors on the device (enough to see
which device a factory was asked for; no operators), and the collective backend ``dist_backend`` (its
process groups are gloo's, so ``init_process_group`` completes and reports the backend by name).

A fake package loads this file by its path (not by import), so only the package's own setup directory
goes on ``PYTHONPATH``.
"""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import torch
import torch.distributed as dist

MEMORY = 64 * 2**30
_KEEPALIVE: list[object] = []  # C++ keeps raw pointers to the hooks and guard; libraries live while referenced


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


class FakeTensor(torch.Tensor):
    """A storage-less tensor on the fake device: shape, dtype and device, nothing to compute with."""

    @staticmethod
    def __new__(cls, size, stride, dtype, device):  # noqa: ANN001, ANN205
        return torch.Tensor._make_wrapper_subclass(cls, size, strides=stride, dtype=dtype, device=device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        raise NotImplementedError(f"fake vendor device: {func} is not implemented (test-only plugin)")


def device_module(qualname: str, device_type: str, name: str, count: int) -> ModuleType:
    """``torch.<device_type>``: availability, count, selection, name and properties of ``count`` devices."""
    module = ModuleType(qualname, f"torch.{device_type} of a test-only fake plugin")
    state = {"current": 0}

    def set_device(device) -> None:  # noqa: ANN001
        state["current"] = device if isinstance(device, int) else torch.device(device).index or 0

    functions = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lambda: None,
        "device_count": lambda: count,
        "current_device": lambda: state["current"],
        "set_device": set_device,
        "synchronize": lambda device=None: None,
        "get_device_name": lambda device=None: name,
        "get_device_properties": lambda device=None: SimpleNamespace(name=name, total_memory=MEMORY,
                                                                     multi_processor_count=1),
        "get_amp_supported_dtype": lambda: [torch.float16, torch.bfloat16],
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "memory_allocated": lambda device=None: 0,
    }
    for key, fn in functions.items():
        setattr(module, key, fn)
    return module


def _register_kernels(device_type: str, module: ModuleType) -> None:
    def new(size, stride, dtype, device):  # noqa: ANN001, ANN202
        index = torch.device(device).index
        device = torch.device(device_type, module.current_device() if index is None else index)
        return FakeTensor(tuple(size), tuple(stride), dtype or torch.get_default_dtype(), device)

    def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):  # noqa: ANN001, ANN202
        return new(size, torch.empty(size, device="meta").stride(), dtype, device)

    def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):  # noqa: ANN001, ANN202
        return new(size, stride, dtype, device)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", empty, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    _KEEPALIVE.append(lib)


def _register_backend(dist_backend: str, device_type: str) -> None:
    if not dist.is_available():
        return

    def create(store, rank, size, timeout):  # noqa: ANN001, ANN202
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    dist.Backend.register_backend(dist_backend, create, devices=[device_type])


def register(framework: ModuleType, device_type: str, name: str, count: int, dist_backend: str) -> ModuleType:
    """Make ``framework`` (the fake package being imported) a plugin for ``device_type``."""
    module = device_module(f"{framework.__name__}.{device_type}", device_type, name, count)
    setattr(framework, device_type, module)
    sys.modules[module.__name__] = module
    _KEEPALIVE.extend([_Hooks(), _Guard()])
    torch.utils.rename_privateuse1_backend(device_type)
    torch._register_device_module(device_type, module)
    torch._C._acc.register_python_privateuseone_hook(_KEEPALIVE[-2])
    torch._C._acc.register_python_privateuseone_device_guard(_KEEPALIVE[-1])
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=False)
    _register_kernels(device_type, module)
    _register_backend(dist_backend, device_type)
    return module
