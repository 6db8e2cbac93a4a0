"""Tensor statistics without a host synchronisation per call: reduced on the device now, read in batches.

:func:`defer` reduces the device tensors of one call by one call of ``diopi::tensor_stats``
(:func:`op_tools.tensor_stats.device_reduce`) and keeps the result (a few numbers per tensor, in one small device
tensor per call) in a queue; nothing is read on the host. :func:`resolve` brings every waiting result to the host
in one copy per device and fills the statistics dicts in place (:func:`op_tools.tensor_stats.stats_of`, as every
statistics path). Host tensors are reduced at once by the CPU kernel, so they get the very figures of
:func:`op_tools.tensor_stats.tensor_stats`; device tensors get them within the rounding of the accumulation dtype
(float64 where the device has it; in float32 the counts are exact up to 2**24 elements).

Callers resolve at step boundaries and when they stop or flush; :func:`defer` resolves by itself when more
than :data:`MAX_PENDING` tensors wait, so memory stays bounded and synchronisations per step stay constant.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from diopi.case_format import dtype_name
from op_tools import host_stats_worker
from op_tools.protocol import internal
from op_tools.tensor_stats import COLUMNS, device_reduce, stats_of_columns, tensor_stats

__all__ = ["MAX_PENDING", "defer", "forget", "pending", "resolve", "statistics_later"]

#: Device tensors whose statistics may wait unread before :func:`defer` reads them all.
MAX_PENDING = 16384

Targets = list[dict[str, Any]]


class _Batch:
    """The statistics of one call's tensors on one device, waiting: ``data`` is the ``diopi::tensor_stats``
    result (:data:`~op_tools.tensor_stats.COLUMNS` groups of ``k`` numbers: all minima, then all maxima, ...)."""

    __slots__ = ("data", "numels", "targets")

    def __init__(self, data: torch.Tensor, numels: list[int], targets: list[Targets]) -> None:
        self.data, self.numels, self.targets = data, numels, targets


_queue: list[_Batch] = []
_queued_tensors = 0
# id -> (weak reference, version, targets) of each tensor waiting: a tensor met again unchanged (an output that
# the next call takes as input) is not reduced again.
_waiting: dict[int, tuple[weakref.ref, int, Targets]] = {}


def pending() -> int:
    """Device tensors whose statistics wait to be read."""
    return _queued_tensors


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
    groups: dict[torch.device, list[tuple[torch.Tensor, Targets]]] = {}
    with internal():
        for t, targets in by_id.values():
            if t.device.type == "cpu" or t.numel() == 0:
                stats = tensor_stats(t)
                for target in targets:
                    target.update(stats)
                continue
            seen = _waiting.get(id(t))
            if seen is not None and seen[0]() is t and seen[1] == t._version:
                seen[2].extend(targets)  # filled with the same statistics
            else:
                groups.setdefault(t.device, []).append((t, targets))
        for items in groups.values():
            data = device_reduce([t for t, _ in items])
            _queue.append(_Batch(data, [t.numel() for t, _ in items], [targets for _, targets in items]))
            _queued_tensors += len(items)
            for t, targets in items:
                _waiting[id(t)] = (weakref.ref(t), t._version, targets)
    if _queued_tensors > MAX_PENDING:
        resolve()


_dtype_name = functools.cache(dtype_name)  # "float32", looked up once per dtype


def statistics_later(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
    """Statistics dicts of named tensors from their values now, filled at the next :func:`resolve`: dtype, shape
    and numel of every tensor, and for floating ones the statistics of :func:`op_tools.tensor_stats.stats_of`, host
    tensors copied and reduced on the background thread (:mod:`op_tools.host_stats_worker`), device tensors by
    :func:`defer`. Module dumps take their statistics this way."""
    stats = {}
    device_names = []
    for name, t in tensors.items():
        stats[name] = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape), "numel": t.numel()}
        if not (t.is_floating_point() or t.is_complex()):
            continue
        if t.device.type == "cpu":
            host_stats_worker.submit(t, stats[name])
        else:
            device_names.append(name)
    if device_names:
        defer([tensors[name] for name in device_names], [stats[name] for name in device_names])
    return stats


def resolve() -> None:
    """Read every waiting statistic (one copy to the host per device) and fill its dicts; wait for the host
    statistics :func:`statistics_later` handed to the background thread."""
    global _queued_tensors
    host_stats_worker.wait()
    if not _queue:
        return
    batches, _queue[:] = list(_queue), []
    _queued_tensors = 0
    _waiting.clear()
    by_device: dict[torch.device, list[_Batch]] = {}
    for batch in batches:
        by_device.setdefault(batch.data.device, []).append(batch)
    with internal():
        for group in by_device.values():
            data = group[0].data if len(group) == 1 else torch.cat([b.data for b in group])
            values = data.to("cpu").tolist()
            offset = 0
            for batch in group:
                end = offset + len(COLUMNS) * len(batch.numels)
                for stats, targets in zip(stats_of_columns(values[offset:end], batch.numels), batch.targets,
                                          strict=True):
                    for target in targets:
                        target.update(stats)
                offset = end
