"""What happens when a tensor is created on, or moved to, the device in a dtype the device lacks.

Default: nothing here runs, and the plugin's own clear error reaches the user. With ``DITORCH_DTYPE_CAST``
the device-argument wrappers (:mod:`ditorch.mocking.device_strings`) ask :meth:`DtypePolicy.target` and cast
(float64 -> float32, complex128 -> complex64), warning once per call site of the user's code.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ditorch.adapters.base import Adapter

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

_INTERNAL = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))


def supports_dtype_query(adapter: Adapter) -> Callable[[torch.dtype], bool]:
    """How to ask the adapter's device whether it holds a dtype.

    The device module's ``supports_dtype(dtype)`` if it has one; else the plugin's ``runtime()`` object's
    ``supports_dtype`` (torch_dipu's vendor runtime); else every dtype is assumed supported.
    """
    module = adapter.device_module()
    query = getattr(module, "supports_dtype", None)
    if callable(query):
        return query
    framework = sys.modules.get(adapter.framework)
    runtime = getattr(framework, "runtime", None)
    if callable(runtime):
        try:
            if callable(getattr(runtime(), "supports_dtype", None)):
                return lambda dtype: runtime().supports_dtype(dtype)
        except Exception:  # noqa: BLE001  (a runtime() that needs arguments or a device)
            pass
    return lambda dtype: True


def plugin_directory(adapter: Adapter) -> str | None:
    """The package directory of the adapter's device plugin (its frames are not the user's code either)."""
    module = sys.modules.get(adapter.framework)
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) if path else None


def _user_stacklevel(internal: tuple[str, ...]) -> tuple[int, tuple[str, int]]:
    """The ``stacklevel`` of the first frame outside ``internal`` (torch, ditorch, the device plugin), seen
    from ``warnings.warn`` called in :meth:`DtypePolicy._warn`, and that frame's (file, line)."""
    frame = sys._getframe(3)
    level = 3
    while frame.f_back is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    return level, (frame.f_code.co_filename, frame.f_lineno)


class DtypePolicy:
    """The cast table of ``DITORCH_DTYPE_CAST`` and the device's dtype query."""

    def __init__(self, casts: dict[torch.dtype, torch.dtype], supports: Callable[[torch.dtype], bool],
                 device_type: str, plugin_dir: str | None = None) -> None:
        self.casts = casts
        self.supports = supports
        self.device_type = device_type
        self.internal = _INTERNAL + ((plugin_dir,) if plugin_dir else ())
        self._warned: set[tuple[str, int]] = set()

    def target(self, dtype: torch.dtype | None, what: str) -> torch.dtype | None:
        """The dtype to use instead of ``dtype`` on the device (warning once per call site), or None."""
        new = self.casts.get(dtype) if dtype is not None else None
        if new is None or self.supports(dtype) or not self.supports(new):
            return None
        self._warn(dtype, new, what)
        return new

    def _warn(self, old: torch.dtype, new: torch.dtype, what: str) -> None:
        level, site = _user_stacklevel(self.internal)
        if site in self._warned:
            return
        self._warned.add(site)
        warnings.warn(
            f"ditorch: {self.device_type} does not support {old}; {what} cast to {new} (DITORCH_DTYPE_CAST)",
            UserWarning, stacklevel=level,
        )

    # -- the places that apply it -------------------------------------------------------------------------
    def factory(self, name: str, args: tuple, kwargs: dict[str, Any], device: Any) -> tuple:
        """Fix ``kwargs['dtype']`` of a factory call creating a tensor on ``device`` (the translated device); the
        returned positional arguments have tensor/array data cast on the host (the device cannot read it)."""
        if torch.device(device).type != self.device_type:
            return args
        dtype = kwargs.get("dtype")
        from_data = False
        if dtype is None:
            data = args[0] if args else kwargs.get("data", kwargs.get("input"))
            dtype = getattr(data, "dtype", None)
            if not isinstance(dtype, torch.dtype):
                dtype = _numpy_dtype(dtype)
            from_data = dtype is not None and bool(args)
            if dtype is None and name in _DEFAULT_DTYPE_FACTORIES:
                dtype = torch.get_default_dtype()
        new = self.target(dtype, f"torch.{name} creates the tensor")
        if new is not None:
            kwargs["dtype"] = new
            if from_data:
                args = (torch.as_tensor(args[0]).to(new), *args[1:])
        return args

    def move(self, tensor: torch.Tensor, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
        """New ``Tensor.to`` arguments when the result would be a device tensor of an unsupported dtype."""
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        target_device = device if device is not None else tensor.device
        if target_device.type != self.device_type:
            return None
        new = self.target(dtype if dtype is not None else tensor.dtype, "Tensor.to moves the tensor")
        if new is None:
            return None
        out = {"dtype": new, "non_blocking": non_blocking, "copy": kwargs.get("copy", False)}
        if device is not None:
            out["device"] = device
        if memory_format is not None:
            out["memory_format"] = memory_format
        return (), out


_DEFAULT_DTYPE_FACTORIES = frozenset(
    ("empty", "zeros", "ones", "rand", "randn", "eye", "linspace", "logspace", "empty_strided", "normal")
)


def _numpy_dtype(dtype: Any) -> torch.dtype | None:
    name = getattr(dtype, "name", None)
    return {"float64": torch.float64, "complex128": torch.complex128}.get(name) if isinstance(name, str) else None
