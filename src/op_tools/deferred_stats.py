"""Tensor statistics without a host synchronisation per call: reduced on the device now, read in batches.

:func:`defer` reduces the device tensors of one call with device operators only, and keeps the results (a few
numbers per tensor, in one small device tensor per call) in a queue; nothing is read on the host. Non-finite
elements are left out of min, max, sum and norm and counted apart; all of a call's tensors are reduced by one
call of the DIOPI function ``diopiTensorStats`` (``torch.ops.diopi.tensor_stats``), one kernel on a vendor that
implements it. :func:`resolve`
brings every waiting result to the host in one copy per device and fills the statistics dicts in place. Host
tensors are reduced at once by the CPU kernel, so they get the very figures of
:func:`op_tools.tensor_stats.device_stats`; device tensors get them within float32 rounding (sums, norms and
counts are taken in float64 where the device has it; in float32 the counts are exact up to 2**24 elements).

Callers resolve at step boundaries and when they stop or flush; :func:`defer` resolves by itself when more
than :data:`MAX_PENDING` tensors wait, so memory stays bounded and synchronisations per step stay constant.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

import diopi  # noqa: F401  (defines torch.ops.diopi.tensor_stats)
from op_tools.protocol import internal
from op_tools.tensor_stats import device_stats, stats_of

__all__ = ["MAX_PENDING", "defer", "forget", "pending", "resolve"]

#: Device tensors whose statistics may wait unread before :func:`defer` reads them all.
MAX_PENDING = 16384

_EMPTY_ROW = [math.nan, math.nan, 0.0, 0.0, 0, 0, 0]
_FIELDS = 6  # per tensor: min, max, sum, norm, non-finite count, NaN count

Targets = list[dict[str, Any]]


class _Batch:
    """The statistics of one call's tensors on one device, waiting: ``data`` holds :data:`_FIELDS` groups of
    ``k`` numbers (all minima, then all maxima, ...)."""

    __slots__ = ("data", "numels", "targets")

    def __init__(self, data: torch.Tensor, numels: list[int], targets: list[Targets]) -> None:
        self.data, self.numels, self.targets = data, numels, targets


_queue: list[_Batch] = []
_queued_tensors = 0
# id -> (weak reference, version, targets) of each tensor waiting: a tensor met again unchanged (an output that
# the next call takes as input) is not reduced again.
_waiting: dict[int, tuple[weakref.ref, int, Targets]] = {}
_has_float64: dict[str, bool] = {}
_reducible: dict[tuple[str, torch.dtype, torch.dtype], bool] = {}


def pending() -> int:
    """Device tensors whose statistics wait to be read."""
    return _queued_tensors


def _can_reduce(device: torch.device, dtype: torch.dtype, acc: torch.dtype) -> bool:
    """Whether the device reduces a tensor of ``dtype`` into ``acc`` (a vendor may lack the kernels of some dtypes:
    ``isfinite`` or ``abs`` of float32 only); tried once per device type and dtypes, on a two-element tensor."""
    key = (device.type, dtype, acc)
    known = _reducible.get(key)
    if known is None:
        try:
            _reduce([torch.zeros(2, dtype=dtype, device=device)], acc)
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


def _reduce(tensors: list[torch.Tensor], acc: torch.dtype) -> torch.Tensor:
    """:data:`_FIELDS` numbers per tensor in one device tensor of ``acc``: one call of the DIOPI function
    ``diopiTensorStats`` (``torch.ops.diopi.tensor_stats``), which a vendor runs as one kernel and any other
    device as a few device operators; nothing is read on the host."""
    return torch.ops.diopi.tensor_stats(tensors, acc)


def forget(tensors: list[torch.Tensor]) -> None:
    """Reduce ``tensors`` afresh when they come again: a call wrote into them, which their version counters
    may not show (PyTorch bumps them for autograd; a device's ``foreach`` kernels may not)."""
    for t in tensors:
        _waiting.pop(id(t), None)


def defer(tensors: list[torch.Tensor], into: Targets) -> None:
    """Fill ``into[i]`` with the statistics of ``tensors[i]`` (the keys of :func:`~op_tools.tensor_stats.stats_of`):
    at once for host and empty tensors, at the next :func:`resolve` for the others (from their values now). A
    tensor object given twice, or again unchanged (same version) while its statistics wait, is reduced once."""
    global _queued_tensors
    by_id: dict[int, tuple[torch.Tensor, Targets]] = {}
    for t, target in zip(tensors, into, strict=True):
        entry = by_id.get(id(t))
        if entry is None:
            by_id[id(t)] = (t, [target])
        else:
            entry[1].append(target)
    host: list[tuple[torch.Tensor, Targets]] = []
    groups: dict[torch.device, list[tuple[torch.Tensor, Targets]]] = {}
    for t, targets in by_id.values():
        if t.device.type == "cpu":
            host.append((t, targets))
        elif t.numel() == 0:
            for target in targets:
                target.update(stats_of(_EMPTY_ROW, 0))
        else:
            seen = _waiting.get(id(t))
            if seen is not None and seen[0]() is t and seen[1] == t._version:
                seen[2].extend(targets)  # filled with the same statistics
            else:
                groups.setdefault(t.device, []).append((t, targets))
    if host:
        for (_, targets), stats in zip(host, device_stats([t for t, _ in host]), strict=True):
            for target in targets:
                target.update(stats)
    if not groups:
        return
    with internal(), torch.no_grad():
        for device, items in groups.items():
            acc = _wide(device)
            data = _reduce([_as_float(t, acc) for t, _ in items], acc)
            _queue.append(_Batch(data, [t.numel() for t, _ in items], [targets for _, targets in items]))
            _queued_tensors += len(items)
            for t, targets in items:
                _waiting[id(t)] = (weakref.ref(t), t._version, targets)
    if _queued_tensors > MAX_PENDING:
        resolve()


def resolve() -> None:
    """Read every waiting statistic (one copy to the host per device) and fill its dicts."""
    global _queued_tensors
    if not _queue:
        return
    batches, _queue[:] = list(_queue), []
    _queued_tensors = 0
    _waiting.clear()
    by_device: dict[torch.device, list[_Batch]] = {}
    for batch in batches:
        by_device.setdefault(batch.data.device, []).append(batch)
    with internal(), torch.no_grad():
        for group in by_device.values():
            data = group[0].data if len(group) == 1 else torch.cat([b.data for b in group])
            values = data.to("cpu").tolist()
            offset = 0
            for batch in group:
                k = len(batch.numels)
                columns = [values[offset + f * k: offset + (f + 1) * k] for f in range(_FIELDS)]
                offset += _FIELDS * k
                for j, (numel, targets) in enumerate(zip(batch.numels, batch.targets, strict=True)):
                    mn, mx, total, norm, non_finite, nan = (c[j] for c in columns)
                    non_finite, nan = int(non_finite), int(nan)
                    stats = stats_of([mn, mx, total, norm * norm, numel - non_finite, nan, non_finite - nan], numel)
                    for target in targets:
                        target.update(stats)
