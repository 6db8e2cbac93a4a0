"""CUDA mocking: code written for CUDA runs on the active adapter's device.

:func:`install` (called once by detection after the vendor plugin is imported, unless
``DITORCH_DISABLE_MOCK=1`` or the adapter is native) replaces a fixed set of attributes:

- ``torch.cuda``'s functions and classes by the vendor module's (:mod:`.cuda_module`); autocast, GradScaler,
  ``torch.amp.custom_fwd`` accept ``"cuda"``;
- the functions that take a device (factories, ``Tensor.to``/``cuda``/``new_*``, ``torch.load``,
  ``torch.Generator``, ``torch.set_default_device``) translate cuda devices; ``Tensor.is_cuda`` is True for the
  vendor's tensors (:mod:`.device_strings`); ``Module.cuda``/``Module.to`` go through ``Tensor.cuda``/``to``;
- ``torch.distributed``'s ``"nccl"`` becomes ``adapter.dist_backend`` (:mod:`.distributed`);
- ``torch.profiler``'s CUDA activity becomes the vendor's, or is dropped with one warning (:mod:`.profiler`);
- ``with torch.device(...)``/``set_default_device`` keep working over the wrapped factories;
- ``nn.DataParallel`` works over one device and refuses several clearly (:mod:`.data_parallel`);
- ``model.cuda()`` keeps each parameter the same object, so tied weights stay tied (:mod:`.module_identity`);
- on request, the dtype policy (:mod:`.dtype_policy`, ``DITORCH_DTYPE_CAST``) and ``tensor.device`` shown as
  cuda (:mod:`.show_device`, ``DITORCH_SHOW_DEVICE_AS_CUDA``).

Nothing intercepts every torch call: each wrapper sits on one function that takes a device argument and
returns to PyTorch after a dict lookup when no device is given. :func:`uninstall` restores everything.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diopi.privateuse1 import accelerator_serves
from ditorch.adapters.base import Adapter
from ditorch.mocking import (
    cuda_module,
    data_parallel,
    device_strings,
    distributed,
    module_identity,
    profiler,
    show_device,
    switches,
)
from ditorch.mocking.device_strings import Translator
from ditorch.mocking.dtype_policy import DtypePolicy, plugin_directory, supports_dtype_query
from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

__all__ = ["MockState", "install", "installed", "uninstall"]

_UNSET = object()


@dataclass
class MockState:
    adapter: Adapter
    patches: Patches
    translator: Translator


_STATE: MockState | None = None


def install(adapter: Adapter, *, show_device_as_cuda: bool | None = None,
            dtype_cast: str | bool | dict | None = _UNSET) -> None:  # type: ignore[assignment]
    """Make CUDA-written code run on ``adapter``'s device. Idempotent (a second call with the same adapter does
    nothing; with another adapter it re-installs).

    ``show_device_as_cuda`` defaults to ``DITORCH_SHOW_DEVICE_AS_CUDA``; ``dtype_cast`` to
    ``DITORCH_DTYPE_CAST`` (None/False: keep the device's error; True: the default casts; a mapping or
    ``"float64:float32"`` text).
    """
    global _STATE
    if _STATE is not None:
        if _STATE.adapter == adapter:
            return
        uninstall()
    if adapter.is_native and adapter.device_type == "cuda":
        return
    show = switches.show_device_as_cuda() if show_device_as_cuda is None else bool(show_device_as_cuda)
    casts = switches.dtype_cast() if dtype_cast is _UNSET else switches.parse_dtype_cast(dtype_cast, "dtype_cast")
    module = adapter.device_module()
    policy = DtypePolicy(casts, supports_dtype_query(adapter), adapter.device_type, plugin_directory(adapter)) \
        if casts else None
    # A module without current_device/device_count: torch.accelerator's when it serves this device (a plugin with a
    # bare module), else one device, 0 (single-device backends: mps).
    generic = accelerator_serves(adapter.device_type)
    current_device = getattr(module, "current_device", None) or (
        torch.accelerator.current_device_index if generic else (lambda: 0))
    device_count = getattr(module, "device_count", None) or (torch.accelerator.device_count if generic else (lambda: 1))
    translator = Translator(adapter.device_type, current_device, policy, device_count)
    patches = Patches()
    try:
        cuda_module.install(patches, module, translator, adapter.name)
        device_strings.install(patches, translator)
        distributed.install(patches, adapter, translator)
        profiler.install(patches, adapter.device_type)
        data_parallel.install(patches, translator, adapter.name)
        module_identity.install(patches, adapter.device_type)
        if policy is not None:
            _install_conversions(patches, translator)
        if show:
            show_device.install(patches, adapter.device_type, adapter.framework)
    except BaseException:
        patches.restore()
        raise
    _STATE = MockState(adapter, patches, translator)


def _install_conversions(patches: Patches, tr: Translator) -> None:
    """With a dtype policy: ``Tensor.double()``/``cdouble()`` of a device tensor follow it too."""
    for name, dtype in (("double", torch.float64), ("cdouble", torch.complex128)):
        original = getattr(torch.Tensor, name)

        def convert(self: torch.Tensor, *args: object, _original=original, _dtype=dtype, _name=name, **kwargs):  # noqa: ANN001, ANN202
            if torch._C.TensorBase.device.__get__(self).type == tr.device_type and tr.policy is not None:
                new = tr.policy.target(_dtype, f"Tensor.{_name}() converts the tensor")
                if new is not None:
                    return self.to(new)
            return _original(self, *args, **kwargs)

        patches.set(torch.Tensor, name, convert)


def uninstall() -> None:
    """Restore every attribute :func:`install` replaced (for tests)."""
    global _STATE
    if _STATE is not None:
        _STATE.patches.restore()
        _STATE = None


def installed() -> MockState | None:
    """The active mocking state, or None."""
    return _STATE
