"""Per-tensor statistics for ``OP_CAPTURE_MODE=stats``: min, max, mean, std, norm over the finite
elements, and the NaN and Inf counts.

All tensors of one call are reduced by one operator, ``torch.ops.op_tools.tensor_stats(tensors)``, which
returns ``len(tensors) * 7`` floats, the sums of :data:`COLUMNS` tensor after tensor (a list of floats
reaches the host with the op's result, without a tensor copy):

- on the CPU it is one kernel: the sum by torch's cascade summation and the sum of squares by a BLAS dot
  product, both in the tensor's precision (float64 when they overflow it), min and max in one pass by
  ``torch.aminmax``; a tensor holding NaN or Inf takes a slower path that counts them;
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
    if t.requires_grad:
        t = t.detach()
    if t.is_complex():
        t = t.abs()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32 if t.is_floating_point() or t.dtype == torch.bool or t.element_size() < 4
                 else torch.float64)
    n = t.numel()
    if n == 0:
        return (math.nan, math.nan, 0.0, 0.0, 0, 0, 0)
    v = t if t.dim() == 1 else t.reshape(-1)
    total = v.sum().item()  # torch's cascade summation: vectorized, error growing with log(n)
    if math.isfinite(total):  # no NaN or Inf: three passes, min and max in one
        mn, mx = torch.aminmax(v)
        sumsq = torch.dot(v, v).item()  # BLAS, in the tensor's precision
        if math.isinf(sumsq):  # the squares overflow the tensor's precision
            sumsq = torch.dot(v.double(), v.double()).item()
        return (mn.item(), mx.item(), total, sumsq, n, 0, 0)
    a = v.numpy()
    nan = int(np.count_nonzero(np.isnan(a)))
    inf = int(np.count_nonzero(np.isinf(a)))
    if nan or inf:
        a = a[np.isfinite(a)]
    if a.size == 0:
        return (math.nan, math.nan, 0.0, 0.0, 0, nan, inf)
    wide = a.astype(np.float64)  # finite values whose sum overflowed the tensor's precision, or the rest
    return (float(a.min()), float(a.max()), float(wide.sum()), float(np.dot(wide, wide)), int(a.size), nan, inf)


def _cpu_kernel(tensors: list[torch.Tensor]) -> list[float]:
    return [float(v) for t in tensors for v in _host_row(t)]


def _generic_kernel(tensors: list[torch.Tensor]) -> list[float]:
    """Any device: four reductions per floating tensor on the device, their results brought to the host in
    one copy per precision (no synchronization per tensor); non-finite, integer and complex tensors are
    reduced on the host."""
    on_device: dict[torch.dtype, tuple[list[int], list[torch.Tensor]]] = {}
    for i, t in enumerate(tensors):
        if t.is_floating_point() and t.numel():
            wide = torch.float64 if t.dtype == torch.float64 else torch.float32
            mn, mx = torch.aminmax(t)
            sums = torch.stack([mn.to(wide), mx.to(wide), t.sum(dtype=wide),
                                torch.linalg.vector_norm(t, dtype=wide) ** 2])
            indices, rows = on_device.setdefault(wide, ([], []))
            indices.append(i)
            rows.append(sums)
    result: list[tuple[float, ...] | None] = [None] * len(tensors)
    for indices, rows in on_device.values():
        for i, row in zip(indices, torch.stack(rows).to("cpu").tolist(), strict=True):
            if all(math.isfinite(v) for v in row):
                result[i] = (*row, tensors[i].numel(), 0, 0)
    return [float(v) for i, t in enumerate(tensors) for v in (result[i] or _host_row(t.to("cpu")))]


def _operator() -> Any:
    """``torch.ops.op_tools.tensor_stats``, defined on first use."""
    global _LIBRARY
    if _LIBRARY is None:
        library = torch.library.Library("op_tools", "DEF")
        library.define("tensor_stats(Tensor[] tensors) -> float[]")
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
    width = len(COLUMNS)
    for indices in by_device.values():
        flat = op([tensors[i] for i in indices])
        for k, i in enumerate(indices):
            results[i] = stats_of(flat[k * width:(k + 1) * width], tensors[i].numel())
    return results  # type: ignore[return-value]


def tensor_stats(t: torch.Tensor) -> dict[str, Any]:
    """Statistics of one host tensor (the CPU kernel)."""
    return stats_of(list(_host_row(t)), t.numel())
