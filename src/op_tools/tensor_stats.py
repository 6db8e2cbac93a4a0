"""Per-tensor statistics for ``OP_CAPTURE_MODE=stats``: min, max, mean, std, norm over the finite
elements, and the NaN and Inf counts.

:func:`device_stats` reduces tensors where they are (the capture uses it: nothing is copied);
:func:`tensor_stats` reduces a host tensor exactly, in float64 with numpy (tensors holding NaN or Inf, and
integer, boolean and complex tensors, take that path).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["device_stats", "tensor_stats"]

_EMPTY = {"min": None, "max": None, "mean": None, "std": None, "norm": None}


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.is_complex():
        t = t.abs()
    if t.dtype in (torch.bfloat16, torch.float16, torch.bool) or t.dtype.itemsize == 1 and t.is_floating_point():
        t = t.to(torch.float32)
    return t.contiguous().numpy().reshape(-1)


def tensor_stats(t: torch.Tensor) -> dict[str, Any]:
    """Statistics of a host tensor; empty tensors give None for every value statistic."""
    a = _as_numpy(t)
    n = int(a.size)
    if n == 0:
        return {"numel": 0, "nan": 0, "inf": 0, **_EMPTY}
    nan = inf = 0
    if a.dtype.kind == "f":
        total = float(a.sum(dtype=np.float64))
        if not math.isfinite(total):
            nan = int(np.isnan(a).sum())
            inf = int(np.isinf(a).sum())
            a = a[np.isfinite(a)]
            if a.size == 0:
                return {"numel": n, "nan": nan, "inf": inf, **_EMPTY}
            total = float(a.sum(dtype=np.float64))
    else:
        total = float(a.sum(dtype=np.float64))
    m = int(a.size)
    mean = total / m
    flat = a if a.dtype.kind == "f" else a.astype(np.float64)
    sumsq = float(np.dot(flat, flat))  # BLAS, no temporary copy
    var = max(sumsq - m * mean * mean, 0.0) / (m - 1) if m > 1 else 0.0
    return {"numel": n, "nan": nan, "inf": inf, "min": float(a.min()), "max": float(a.max()), "mean": mean,
            "std": math.sqrt(var), "norm": math.sqrt(sumsq)}


def _from_sums(n: int, mn: float, mx: float, total: float, norm: float) -> dict[str, Any]:
    if mn == mx:  # a constant tensor: exact, whatever the rounding of the sums
        return {"numel": n, "nan": 0, "inf": 0, "min": mn, "max": mx, "mean": mn, "std": 0.0, "norm": norm}
    mean = min(max(total / n, mn), mx)
    var = max(norm * norm - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
    return {"numel": n, "nan": 0, "inf": 0, "min": mn, "max": mx, "mean": mean, "std": math.sqrt(var),
            "norm": norm}


def device_stats(tensors: list[torch.Tensor]) -> list[dict[str, Any]]:
    """:func:`tensor_stats` of tensors on any device, reduced where they are.

    Each floating tensor takes three reductions on its device (``aminmax``, ``sum`` and the L2 norm,
    accumulated in float32, or float64 for float64 tensors); the scalars of all tensors reach the host in
    one copy. A tensor whose sums are not finite (NaN or Inf inside), and integer, boolean, complex or empty
    tensors, are copied to the host and reduced exactly by :func:`tensor_stats`.
    """
    results: list[dict[str, Any] | None] = [None] * len(tensors)
    reduced: list[int] = []
    scalars: list[torch.Tensor] = []
    for i, t in enumerate(tensors):
        if not t.is_floating_point() or t.numel() == 0 or (reduced and t.device != tensors[reduced[0]].device):
            results[i] = tensor_stats(t.detach().to("cpu"))
            continue
        wide = torch.float64 if t.dtype == torch.float64 else torch.float32
        mn, mx = torch.aminmax(t)
        scalars += [mn, mx, t.sum(dtype=wide), torch.linalg.vector_norm(t, dtype=wide)]  # stack promotes
        reduced.append(i)
    if reduced:
        values = torch.stack(scalars).cpu().tolist()
        for j, i in enumerate(reduced):
            mn, mx, total, norm = values[4 * j: 4 * j + 4]
            if all(math.isfinite(v) for v in (mn, mx, total, norm)):
                results[i] = _from_sums(tensors[i].numel(), mn, mx, total, norm)
            else:
                results[i] = tensor_stats(tensors[i].detach().to("cpu"))
    return results  # type: ignore[return-value]
