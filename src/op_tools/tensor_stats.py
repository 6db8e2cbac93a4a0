"""Per-tensor statistics for ``OP_CAPTURE_MODE=stats``: min, max, mean, std, norm over the finite
elements, and the NaN and Inf counts.

All tensors of one call are reduced by one operator, ``torch.ops.op_tools.tensor_stats(tensors)``, which
returns a ``(len(tensors), 7)`` float64 tensor of sums (see :data:`COLUMNS`) on the tensors' device:

- on the CPU it is one kernel: numpy reductions, the sum accumulated in float64, the sum of squares a BLAS
  dot product in the tensor's precision;
- elsewhere the generic kernel reduces each tensor with a few device ops;
- a vendor can register a fused kernel for its dispatch key (``torch.library.impl("op_tools::tensor_stats",
  ...)``);
- a device that falls back to the CPU for operators it lacks (dipu does) runs it as one CPU call.

:func:`stats_of` turns the sums into statistics. A constant tensor's std is exactly 0; otherwise std
follows from the sum of squares and loses precision when the spread is far below the mean.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["COLUMNS", "device_stats", "stats_of", "tensor_stats"]

#: The columns of ``op_tools::tensor_stats``, all over the finite elements except the two counts.
COLUMNS = ("min", "max", "sum", "sumsq", "finite", "nan", "inf")

_LIBRARY: torch.library.Library | None = None


def _host_row(t: torch.Tensor) -> tuple[float, ...]:
    t = t.detach()
    if t.is_complex():
        t = t.abs()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32 if t.is_floating_point() or t.dtype == torch.bool or t.element_size() < 4
                 else torch.float64)
    a = t.contiguous().numpy().reshape(-1)
    if a.size == 0:
        return (math.nan, math.nan, 0.0, 0.0, 0, 0, 0)
    total = float(a.sum(dtype=np.float64))
    nan = inf = 0
    if not math.isfinite(total):
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        a = a[np.isfinite(a)]
        if a.size == 0:
            return (math.nan, math.nan, 0.0, 0.0, 0, nan, inf)
        total = float(a.sum(dtype=np.float64))
    return (float(a.min()), float(a.max()), total, float(np.dot(a, a)), int(a.size), nan, inf)


def _cpu_kernel(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([_host_row(t) for t in tensors], dtype=torch.float64).reshape(len(tensors), len(COLUMNS))


def _generic_kernel(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Any device: a few reductions per tensor, on the device; non-finite and non-float tensors on the host."""
    rows = []
    device = tensors[0].device if tensors else torch.device("cpu")
    for t in tensors:
        if t.is_floating_point() and t.numel():
            wide = torch.float64 if t.dtype == torch.float64 else torch.float32
            mn, mx = torch.aminmax(t)
            total = t.sum(dtype=wide)
            sumsq = torch.linalg.vector_norm(t, dtype=wide) ** 2
            row = torch.stack([mn.to(wide), mx.to(wide), total, sumsq]).to("cpu", torch.float64).tolist()
            if all(math.isfinite(v) for v in row):
                rows.append((*row, t.numel(), 0, 0))
                continue
        rows.append(_host_row(t.to("cpu")))
    return torch.tensor(rows, dtype=torch.float64).reshape(len(tensors), len(COLUMNS)).to(device)


def _operator() -> Any:
    """``torch.ops.op_tools.tensor_stats``, defined on first use."""
    global _LIBRARY
    if _LIBRARY is None:
        library = torch.library.Library("op_tools", "DEF")
        library.define("tensor_stats(Tensor[] tensors) -> Tensor")
        library.impl("tensor_stats", _cpu_kernel, "CPU")
        library.impl("tensor_stats", _generic_kernel, "CompositeExplicitAutograd")
        _LIBRARY = library
    return torch.ops.op_tools.tensor_stats


def stats_of(row: list[float], numel: int) -> dict[str, Any]:
    """Statistics from one row of sums (:data:`COLUMNS`)."""
    mn, mx, total, sumsq, finite, nan, inf = row
    finite = int(finite)
    stats: dict[str, Any] = {"numel": numel, "nan": int(nan), "inf": int(inf)}
    if finite == 0:
        return {**stats, "min": None, "max": None, "mean": None, "std": None, "norm": None}
    if mn == mx:  # a constant tensor: exact, whatever the rounding of the sums
        return {**stats, "min": mn, "max": mx, "mean": mn, "std": 0.0, "norm": math.sqrt(max(sumsq, 0.0))}
    mean = min(max(total / finite, mn), mx)
    var = max(sumsq - finite * mean * mean, 0.0) / (finite - 1) if finite > 1 else 0.0
    return {**stats, "min": mn, "max": mx, "mean": mean, "std": math.sqrt(var), "norm": math.sqrt(max(sumsq, 0.0))}


def device_stats(tensors: list[torch.Tensor]) -> list[dict[str, Any]]:
    """Statistics of ``tensors``, reduced where they are: one operator call and one copy to the host per
    device. Call it without autograd recording (``torch.no_grad``); the operator has no derivative."""
    results: list[dict[str, Any] | None] = [None] * len(tensors)
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    op = _operator()
    for indices in by_device.values():
        rows = op([tensors[i] for i in indices]).cpu().tolist()
        for i, row in zip(indices, rows, strict=True):
            results[i] = stats_of(row, tensors[i].numel())
    return results  # type: ignore[return-value]


def tensor_stats(t: torch.Tensor) -> dict[str, Any]:
    """Statistics of one host tensor, exactly (float64 accumulation)."""
    return stats_of(list(_host_row(t)), t.numel())
