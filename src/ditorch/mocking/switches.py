"""The switches of the mocking layer, read through :mod:`ditorch.config` (each also has a keyword of
:func:`ditorch.mocking.install`).

| variable                      | default | meaning                                                              |
|-------------------------------|---------|----------------------------------------------------------------------|
| ``DITORCH_SHOW_DEVICE_AS_CUDA`` | ``0``   | ``tensor.device`` of the vendor's tensors reads as ``cuda:N``          |
| ``DITORCH_DTYPE_CAST``          | unset   | unset/``0``: unsupported dtypes raise; ``1``: cast float64->float32,   |
|                               |         | complex128->complex64; or a mapping ``float64:float32,...``            |

(``DITORCH_DISABLE_MOCK`` is read by detection, which then does not call ``install`` at all.)
"""

from __future__ import annotations

import torch

from diopi.env import ConfigError, parse_flag
from ditorch.config import DitorchConfig

DEFAULT_CASTS: dict[torch.dtype, torch.dtype] = {torch.float64: torch.float32, torch.complex128: torch.complex64}


def _dtype(name: str, source: str) -> torch.dtype:
    value = getattr(torch, name.strip().removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"{source}: {name.strip()!r} is not a torch dtype")
    return value


def parse_dtype_cast(text: str | bool | dict | None, source: str = "DITORCH_DTYPE_CAST") -> dict | None:
    """The cast table chosen by ``DITORCH_DTYPE_CAST`` (None: keep the error).

    Accepts a boolean, a ``{dtype: dtype}`` dict, or text: ``1``/``true`` (the default table), ``0``/empty (no
    casting), or comma-separated ``from:to`` pairs (``float64:float32,complex128:complex64``).
    """
    if text is None:
        return None
    if isinstance(text, dict):
        return {(_dtype(k, source) if isinstance(k, str) else k): (_dtype(v, source) if isinstance(v, str) else v)
                for k, v in text.items()}
    flag = text if isinstance(text, bool) else parse_flag(text)
    if flag is not None:
        return dict(DEFAULT_CASTS) if flag else None
    value = text.strip().lower()
    casts = {}
    for entry in value.replace(";", ",").split(","):
        if not entry.strip():
            continue
        if ":" not in entry:
            raise ConfigError(f"{source}={text!r}: entry {entry.strip()!r} is not 'from:to' (e.g. float64:float32)")
        src, dst = entry.split(":", 1)
        casts[_dtype(src, source)] = _dtype(dst, source)
    return casts or None


def show_device_as_cuda() -> bool:
    return DitorchConfig.from_env().show_device_as_cuda


def dtype_cast() -> dict | None:
    return parse_dtype_cast(DitorchConfig.from_env().dtype_cast)
