"""Statistics of tensors (``OP_CAPTURE_MODE=stats``, OpOverflowCheck, gradient statistics, module dumps): min,
max, mean, std, norm over the finite elements, and the NaN and Inf counts.

Every tensor is reduced by the one statistics operator, the DIOPI function ``diopiTensorStats``
(``torch.ops.diopi.tensor_stats``, :data:`COLUMNS` per tensor):

- host tensors by its CPU kernel, called without the dispatch (:func:`diopi.custom_ops.tensor_stats_row`: torch's
  cascade sum, a BLAS dot product and ``torch.aminmax`` in the tensor's precision, float64 when the sums
  overflow it, a slower path that counts NaN and Inf);
- the tensors of one device by one call of the operator (:func:`device_reduce`): one kernel on a vendor that
  implements it, a few device operators elsewhere; the result stays on the device until read, at once by
  :func:`device_stats` or in batches by :mod:`op_tools.deferred_stats`.

:func:`stats_of` turns every row into statistics. A constant tensor's std is exactly 0; otherwise std follows
from the sum of squares and loses precision when the spread is far below the mean. Device tensors get the host
figures within the rounding of the accumulation dtype (float64 where the device has it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from diopi.custom_ops import TENSOR_STATS_COLUMNS, tensor_stats_row
from op_tools.protocol import internal

__all__ = ["COLUMNS", "device_reduce", "device_stats", "stats_of", "stats_of_columns", "tensor_stats"]

#: The columns of ``diopi::tensor_stats``: min, max, sum, norm over the finite elements, non-finite and NaN counts.
COLUMNS = TENSOR_STATS_COLUMNS

_has_float64: dict[str, bool] = {}
_reducible: dict[tuple[str, torch.dtype, torch.dtype], bool] = {}


def _can_reduce(device: torch.device, dtype: torch.dtype, acc: torch.dtype) -> bool:
    """Whether the device reduces a tensor of ``dtype`` into ``acc`` (a vendor may lack the kernels of some dtypes:
    ``isfinite`` or ``abs`` of float32 only); tried once per device type and dtypes, on a two-element tensor."""
    key = (device.type, dtype, acc)
    known = _reducible.get(key)
    if known is None:
        try:
            torch.ops.diopi.tensor_stats([torch.zeros(2, dtype=dtype, device=device)], acc)
            known = True
        except Exception:
            known = False
        _reducible[key] = known
    return known


def _wide(device: torch.device) -> torch.dtype:
    """float64 where the device has it and reduces in it, else float32."""
    known = _has_float64.get(device.type)
    if known is None:
        try:
            torch.zeros((), dtype=torch.float64, device=device)
            known = _can_reduce(device, torch.float64, torch.float64)
        except Exception:
            known = False
        _has_float64[device.type] = known
    return torch.float64 if known else torch.float32


def _as_float(t: torch.Tensor, wide: torch.dtype) -> torch.Tensor:
    """A floating tensor with ``t``'s values (as the CPU kernel: complex as magnitudes, integers of 4 bytes
    or more in ``wide``, other integers and booleans in float32), in ``wide`` when the device cannot reduce
    its dtype."""
    t = t.detach()
    if t.is_complex():
        t = t.abs()
    if not t.is_floating_point():
        t = t.to(wide if t.dtype != torch.bool and t.element_size() >= 4 else torch.float32)
    if t.dtype != wide and not _can_reduce(t.device, t.dtype, wide):
        t = t.to(wide)
    return t


def device_reduce(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One call of ``diopi::tensor_stats`` on non-empty ``tensors`` of one device, in float64 where the device has
    it: a device tensor of :data:`COLUMNS` groups of ``len(tensors)`` numbers; nothing is read on the host."""
    acc = _wide(tensors[0].device)
    return torch.ops.diopi.tensor_stats([_as_float(t, acc) for t in tensors], acc)


def stats_of(row: Sequence[float], numel: int) -> dict[str, Any]:
    """Statistics from one tensor's row of ``diopi::tensor_stats`` (:data:`COLUMNS`)."""
    mn, mx, total, norm, non_finite, nan = row
    nan = int(nan)
    finite = numel - int(non_finite)
    stats: dict[str, Any] = {"numel": numel, "nan": nan, "inf": int(non_finite) - nan}
    if finite == 0:
        return {**stats, "min": None, "max": None, "mean": None, "std": None, "norm": None}
    if mn == mx:  # a constant tensor: exact, whatever the rounding of the sums
        return {**stats, "min": mn, "max": mx, "mean": mn, "std": 0.0, "norm": norm}
    mean = min(max(total / finite, mn), mx)
    var = max(norm * norm - finite * mean * mean, 0.0) / (finite - 1) if finite > 1 else 0.0
    return {**stats, "min": mn, "max": mx, "mean": mean, "std": math.sqrt(var), "norm": norm}


def stats_of_columns(values: list[float], numels: list[int]) -> list[dict[str, Any]]:
    """Statistics of each tensor from the values of one ``diopi::tensor_stats`` result (column after column)."""
    k = len(numels)
    return [stats_of(values[j::k], numel) for j, numel in enumerate(numels)]


def device_stats(tensors: list[torch.Tensor]) -> list[dict[str, Any]]:
    """Statistics of ``tensors``, read at once: host tensors by the CPU kernel, the others by one operator call and
    one copy to the host per device."""
    results: list[dict[str, Any] | None] = [None] * len(tensors)
    by_device: dict[torch.device, list[int]] = {}
    with internal():
        for i, t in enumerate(tensors):
            if t.device.type == "cpu" or t.numel() == 0:
                results[i] = stats_of(tensor_stats_row(t), t.numel())
            else:
                by_device.setdefault(t.device, []).append(i)
        for indices in by_device.values():
            values = device_reduce([tensors[i] for i in indices]).to("cpu").tolist()
            for i, stats in zip(indices, stats_of_columns(values, [tensors[i].numel() for i in indices]), strict=True):
                results[i] = stats
    return results  # type: ignore[return-value]


def tensor_stats(t: torch.Tensor) -> dict[str, Any]:
    """Statistics of one host tensor (the CPU kernel)."""
    return stats_of(tensor_stats_row(t), t.numel())
