"""Host synchronisations: every point where the host waits for a dipu device, counted per device and kind.

What counts is what a CUDA device would block on, not what a vendor does inside (a vendor may synchronize
to record an event; that is not the user's synchronisation). Kinds (:data:`KINDS`):

- ``copy_d2h``: a device-to-host copy (``.cpu()``, ``.to("cpu")``, ``copy_`` into a host tensor, ``tolist``,
  ``numpy(force=True)``, printing a tensor, an operator that falls back to the CPU); ``non_blocking=True``
  into pinned memory does not count.
- ``copy_h2d``: a blocking host-to-device copy; ``non_blocking=True`` from pinned memory does not count.
- ``item``: a scalar read (``item()``, ``bool(t)``, ``int(t)``, ``float(t)``, ``is_nonzero``, ``equal``).
- ``data_dependent``: an operator whose output shape depends on the values (``nonzero``, ``masked_select``,
  the ``unique`` family, ``repeat_interleave`` without ``output_size``, boolean-mask indexing, one-argument
  ``where``, ``argwhere``, ``bincount``).
- ``synchronize``: ``torch.dipu.synchronize()``, ``torch.accelerator.synchronize()``, ``Stream.synchronize()``.
- ``event_sync``: ``Event.synchronize()`` (``Event.wait`` / ``Stream.wait_event`` wait on the device: not counted).

Counting costs nothing on operators that never synchronise: :func:`handler_wrapper` wraps, when a handler is
built, only the handlers of the overloads above and of CPU fallbacks. ``torch.dipu.set_sync_debug_mode`` (as
``torch.cuda.set_sync_debug_mode``) warns or raises at each synchronisation.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch

from torch_dipu.tensor import DipuTensor

__all__ = [
    "KINDS", "SyncCounts", "counting", "get_sync_debug_mode", "handler_wrapper", "record", "set_sync_debug_mode",
    "synchronize_count", "synchronize_counts",
]

KINDS = ("copy_d2h", "copy_h2d", "item", "data_dependent", "synchronize", "event_sync")

_MODES = {"default": 0, "warn": 1, "error": 2}

#: device index -> synchronisations by kind, since the process started.
_COUNTS: dict[int, Counter[str]] = {}
_mode = 0


def record(kind: str, index: int, op: str) -> None:
    """Count one synchronisation of ``kind`` on ``dipu:index`` caused by ``op`` (warns or raises in the
    sync debug modes; an error-mode synchronisation is refused, so not counted)."""
    if _mode:
        message = f"called a synchronizing dipu operation: {op} ({kind}) on dipu:{index}"
        if _mode == 2:
            raise RuntimeError(message)
        warnings.warn(message, UserWarning, stacklevel=_user_stacklevel())
    counts = _COUNTS.get(index)
    if counts is None:
        counts = _COUNTS[index] = Counter()
    counts[kind] += 1


_INTERNAL = (os.path.dirname(__file__) + os.sep, os.path.dirname(torch.__file__) + os.sep)


def _user_stacklevel() -> int:
    """The stack level of the first frame outside torch and torch_dipu (the user's line, for warnings)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


def _device_index(device: torch.device | str | int | None) -> int:
    from torch_dipu.state import get_state

    return get_state().device_index(device)


def synchronize_count(device: torch.device | str | int | None = None) -> int:
    """Host synchronisations of ``device`` (default: the current dipu device) since the process started."""
    return sum(_COUNTS.get(_device_index(device), {}).values())


def synchronize_counts(device: torch.device | str | int | None = None) -> dict[str, int]:
    """:func:`synchronize_count` by kind (every kind of :data:`KINDS`, zeros included)."""
    counts = _COUNTS.get(_device_index(device), {})
    return {kind: counts.get(kind, 0) for kind in KINDS}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """``0``/``"default"``: count only; ``1``/``"warn"``: a UserWarning at each synchronisation; ``2``/``"error"``:
    a RuntimeError instead of the synchronisation (as ``torch.cuda.set_sync_debug_mode``)."""
    global _mode
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected one of default, warn, error")
        debug_mode = _MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected 0, 1 or 2")
    _mode = int(debug_mode)


def get_sync_debug_mode() -> int:
    """The current sync debug mode: 0 (default), 1 (warn) or 2 (error)."""
    return _mode


def _snapshot() -> dict[int, Counter[str]]:
    return {index: Counter(counts) for index, counts in _COUNTS.items()}


class SyncCounts:
    """Synchronisations within a :func:`counting` block (live inside it, fixed once it ends)."""

    def __init__(self) -> None:
        self._start = _snapshot()
        self._end: dict[int, Counter[str]] | None = None

    def _diff(self) -> dict[int, Counter[str]]:
        end = self._end if self._end is not None else _snapshot()
        return {index: counts - self._start.get(index, Counter()) for index, counts in end.items()}

    @property
    def by_device(self) -> dict[int, int]:
        """Synchronisations by device index (devices with none left out)."""
        return {index: total for index, counts in self._diff().items() if (total := sum(counts.values()))}

    @property
    def by_kind(self) -> dict[str, int]:
        """Synchronisations by kind, all devices together (every kind of :data:`KINDS`)."""
        total: Counter[str] = Counter()
        for counts in self._diff().values():
            total.update(counts)
        return {kind: total.get(kind, 0) for kind in KINDS}

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def close(self) -> None:
        if self._end is None:
            self._end = _snapshot()

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}={v}" for k, v in self.by_kind.items() if v)
        return f"SyncCounts(total={self.total}{', ' + kinds if kinds else ''})"


@contextlib.contextmanager
def counting() -> Iterator[SyncCounts]:
    """``with counting() as counts: ...``: ``counts.total`` / ``counts.by_kind`` are the synchronisations of
    every dipu device inside the block."""
    counts = SyncCounts()
    try:
        yield counts
    finally:
        counts.close()


# -- which operators synchronise ------------------------------------------------------------------------

_ITEM = frozenset({"_local_scalar_dense", "is_nonzero", "equal", "allclose"})
_DATA_DEPENDENT = frozenset({
    "nonzero", "nonzero_numpy", "argwhere", "masked_select", "_unique", "_unique2", "unique_dim",
    "unique_consecutive", "unique_dim_consecutive", "bincount",
})
_MASK_INDEXED = frozenset({"index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_",
                           "_unsafe_index_put"})
_MASK_DTYPES = (torch.bool, torch.uint8)
_DIPU = "dipu"


def _index_of(values: Any) -> int | None:
    for v in values:
        if type(v) is DipuTensor:
            return v.device.index
        if (type(v) is list or type(v) is tuple) and v:
            found = _index_of(v)
            if found is not None:
                return found
    return None


def _has_mask(indices: Any) -> bool:
    return (type(indices) is list or type(indices) is tuple) and any(
        isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in indices)


def _pinned(t: torch.Tensor) -> bool:
    return t.is_pinned()  # torch_dipu.pinned answers for memory pinned for dipu


def copy_kind(src: Any, dst: Any, non_blocking: bool) -> tuple[str, int] | None:
    """``("copy_d2h" | "copy_h2d", device index)`` for a copy between a dipu tensor and a host tensor that
    blocks the host (None for a copy within the device, or an asynchronous one with pinned host memory)."""
    if src.numel() == 0:  # nothing to copy: CUDA returns at once
        return None
    src_dev, dst_dev = src.device, dst.device
    if src_dev.type == _DIPU:
        if dst_dev.type == _DIPU or (non_blocking and _pinned(dst)):
            return None
        return "copy_d2h", src_dev.index
    if dst_dev.type != _DIPU or (non_blocking and _pinned(src)):
        return None
    return "copy_h2d", dst_dev.index


def copied(src: Any, dst: Any, non_blocking: bool, op: str) -> None:
    """Count the copy ``dst.copy_(src)`` if it blocks the host."""
    found = copy_kind(src, dst, non_blocking)
    if found is not None:
        record(found[0], found[1], op)


def copied_to_host(self: Any, kwargs: dict | None, op: str = "aten._to_copy") -> None:
    """Count ``self.to("cpu")`` (``aten._to_copy`` with a host ``device``), unless ``non_blocking``."""
    if (kwargs and kwargs.get("non_blocking")) or self.numel() == 0:
        return
    record("copy_d2h", self.device.index, op)


Handler = Callable[[tuple, dict | None], Any]


def _always(kind: str, name: str) -> Callable[[Handler], Handler]:
    """Count every call of the handler that has a dipu tensor argument as one ``kind`` synchronisation."""
    def wrap(handler: Handler) -> Handler:
        def counted(args: tuple, kwargs: dict | None) -> Any:
            index = _index_of(args) if args else None
            if index is None and kwargs:
                index = _index_of(tuple(kwargs.values()))
            if index is not None:
                record(kind, index, name)
            return handler(args, kwargs)
        return counted
    return wrap


def _data_dependent_when(test: Callable[[tuple, dict | None], bool], name: str) -> Callable[[Handler], Handler]:
    """Count a call of the handler for which ``test(args, kwargs)`` holds and whose positional arguments hold a
    dipu tensor as one ``data_dependent`` synchronisation."""
    def wrap(handler: Handler) -> Handler:
        def counted(args: tuple, kwargs: dict | None) -> Any:
            if test(args, kwargs):
                index = _index_of(args)
                if index is not None:
                    record("data_dependent", index, name)
            return handler(args, kwargs)
        return counted
    return wrap


def handler_wrapper(func: torch._ops.OpOverload, packet: str, fallback: bool = False
                    ) -> Callable[[Handler], Handler] | None:
    """For an overload that may synchronise, a function wrapping its handler to count it; None otherwise
    (decided once, when the handler is built). ``fallback``: the overload runs on the CPU (a vendor copies
    its inputs to the host: one ``copy_d2h`` per call with a dipu input)."""
    name = f"aten.{packet}.{func._overloadname}" if "::" not in packet else str(func)
    if packet in _ITEM or packet in _DATA_DEPENDENT or (packet == "where" and func._overloadname == "default"):
        return _always("item" if packet in _ITEM else "data_dependent", name)
    if fallback:
        return _always("copy_d2h", f"fallback::{name}")
    if packet == "repeat_interleave" and func._overloadname in ("Tensor", "self_Tensor"):
        return _data_dependent_when(lambda args, kwargs: not kwargs or kwargs.get("output_size") is None, name)
    if packet in _MASK_INDEXED:
        position = next((i for i, a in enumerate(func._schema.arguments) if a.name == "indices"), None)
        if position is None:
            return None
        return _data_dependent_when(lambda args, kwargs: _has_mask(
            args[position] if len(args) > position else (kwargs or {}).get("indices")), name)
    if packet in ("copy_", "copy"):
        def copying(handler: Handler) -> Handler:
            def counted(args: tuple, kwargs: dict | None) -> Any:
                dst, src = args[0], args[1] if len(args) > 1 else kwargs["src"]
                if type(src) is not type(dst):  # one side on the host (dipu tensors share one type)
                    non_blocking = args[2] if len(args) > 2 else bool(kwargs and kwargs.get("non_blocking"))
                    copied(src, dst, non_blocking, name)
                return handler(args, kwargs)
            return counted
        return copying
    return None
