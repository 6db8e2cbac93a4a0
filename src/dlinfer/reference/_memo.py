"""The per-step memos (the decode layout, the rotary cos/sin, host-to-device length copies): what the layers of
one step would otherwise compute again from the same tensors.

An entry is keyed by its tensors' identity and version counters and dropped as soon as one of those tensors is
freed (a weak reference's callback), so a memo never keeps a step's device memory alive after the step, and a
tensor id reused by a later step can never hit a stale entry.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any

from torch import Tensor

__all__ = ["StepMemo", "version_key"]

_VERSION = operator.attrgetter("_version")


def version_key(*tensors: Tensor) -> tuple[int, ...] | None:
    """The tensors' version counters, or None when one of them is an inference tensor (made under
    ``torch.inference_mode()``, as LMDeploy's are): those track no version, so nothing is memoised on them."""
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(map(_VERSION, tensors))


class StepMemo:
    """Up to ``size`` entries ``(key tensors, extra key) -> value``, most recent first.

    An entry holds its key tensors' ids and weak references: the references' callbacks drop the entry when a key
    tensor is freed, so while an entry exists its tensors are alive and equal ids mean the same tensors (a lookup
    compares ids and version counters, no reference is called)."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._entries: list[tuple[tuple[int, ...], tuple[int, ...], Any, Any, tuple[weakref.ref, ...]]] = []

    def get(self, tensors: tuple[Tensor, ...], extra: Any) -> Any:
        """The value stored for ``tensors`` (the same objects, unwritten since) and ``extra``, or None."""
        ids = tuple(map(id, tensors))
        for entry in self._entries:
            if entry[0] == ids and entry[2] == extra and entry[1] == tuple(map(_VERSION, tensors)):
                return entry[3]
        return None

    def put(self, tensors: tuple[Tensor, ...], extra: Any, value: Any) -> None:
        """Remember ``value`` for ``tensors`` and ``extra`` (nothing for inference tensors)."""
        versions = version_key(*tensors)
        if versions is None:
            return
        refs = tuple(weakref.ref(t, self._forget) for t in tensors)
        self._entries.insert(0, (tuple(map(id, tensors)), versions, extra, value, refs))
        del self._entries[self.size:]

    def _forget(self, dead: weakref.ref) -> None:
        self._entries = [e for e in self._entries if all(r is not dead for r in e[4])]

    def clear(self) -> None:
        """Drop every entry."""
        self._entries = []
