"""Registration of the ``dipu`` device with PyTorch through the pure-Python PrivateUse1 API."""

from __future__ import annotations

import sys

import torch

from torch_dipu import (
    accelerator,
    autocast,
    claims,
    compile_default,
    composites,
    device_module,
    factories,
    generators,
    module_state,
    pinned,
    shutdown,
)
from torch_dipu.state import get_state
from torch_dipu.tensor import DipuTensor

DEVICE_NAME = "dipu"


class DipuHooks(torch._C._acc.PrivateUse1Hooks):
    """PrivateUse1 hooks: answers PyTorch's questions about the backend."""

    def is_available(self) -> bool:
        return get_state().device_count() > 0

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


_PRIVATEUSE1 = torch._C._autograd.DeviceType.PrivateUse1


class DipuGuard(torch._C._acc.DeviceGuard):
    """The device guard. PyTorch's Python guard supports one device index; torch_dipu tracks the
    current device itself (``torch.dipu.set_device``)."""

    def type_(self, _device_type: torch._C._autograd.DeviceType = _PRIVATEUSE1) -> torch._C._autograd.DeviceType:
        # Called from C++ for every device/stream guard autograd makes, also while the interpreter
        # shuts down (module globals may be gone by then): answer from a default argument.
        return _device_type


_KEEPALIVE: list[object] = []


def privateuse1_refusal() -> str | None:
    """Why ``dipu`` cannot be registered (another plugin holds PrivateUse1, named with how it was loaded), or None."""
    from diopi import privateuse1

    held = privateuse1.holder()
    if held is None or held.device_type == DEVICE_NAME:
        return None
    return (f"torch_dipu cannot register the '{DEVICE_NAME}' device: PrivateUse1 is already held by {held.describe()}; "
            f"one process holds one PrivateUse1 backend")


def register_device() -> None:
    """Rename PrivateUse1 to ``dipu`` and register its module, hooks, guard, kernels and methods."""
    current = torch._C._get_privateuse1_backend_name()
    if current == DEVICE_NAME and hasattr(torch, DEVICE_NAME):
        return
    refusal = privateuse1_refusal()
    if refusal is not None:
        raise RuntimeError(refusal)
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module(DEVICE_NAME, device_module)
    sys.modules.setdefault(f"torch.{DEVICE_NAME}", device_module)
    hooks, guard = DipuHooks(), DipuGuard()
    _KEEPALIVE.extend([hooks, guard])  # the C++ side holds raw pointers to them
    torch._C._acc.register_python_privateuseone_hook(hooks)
    torch._C._acc.register_python_privateuseone_device_guard(guard)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=False
    )
    aten_impls = torch.library.Library("aten", "IMPL")
    fallbacks = torch.library.Library("_", "IMPL")
    _KEEPALIVE.extend([aten_impls, fallbacks])  # registrations live only as long as their Library
    factories.register(aten_impls)
    composites.register(aten_impls)
    claims.install()  # after composites: their kernels stay
    pinned.register(aten_impls)
    autocast.register(aten_impls, fallbacks)
    accelerator.install()
    module_state.install()
    generators.install()
    compile_default.install()
    shutdown.register()
    torch.serialization.register_package(15, lambda storage: None, factories.restore_location)
    # Run backward passes on the calling thread. PyTorch would otherwise run dipu's part of every
    # backward on a device worker thread; dipu kernels are Python (they need the GIL), so the worker
    # only adds thread handoffs and a second OpenMP thread team that competes for the cores
    # (measured: ~15% of a W1 training step). Results are unchanged. Thread-local: the importing thread.
    torch._C._set_multithreading_enabled(False)
    # Let optimizers pick their foreach implementation on dipu, as they do on CUDA.
    optimizer_module = sys.modules["torch.optim.optimizer"]
    if DipuTensor not in optimizer_module._foreach_supported_types:
        optimizer_module._foreach_supported_types.append(DipuTensor)
