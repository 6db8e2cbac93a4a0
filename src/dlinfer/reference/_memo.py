"""The per-step memos (the decode layout, the rotary cos/sin, host-to-device length copies): what the layers of
one step would otherwise compute again from the same tensors.

An entry is keyed by its tensors' identity and version counters and dropped as soon as one of those tensors is
freed (a weak reference's callback), so a memo never keeps a step's device memory alive after the step, and a
tensor id reused by a later step can never hit a stale entry.
"""

from __future__ import annotations

import weakref
from typing import Any

from torch import Tensor

__all__ = ["StepMemo", "version_key"]


def version_key(*tensors: Tensor) -> tuple[int, ...] | None:
    """The tensors' version counters, or None when one of them is an inference tensor (made under
    ``torch.inference_mode()``, as LMDeploy's are): those track no version, so nothing is memoised on them."""
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(t._version for t in tensors)


class StepMemo:
    """Up to ``size`` entries ``(key tensors, extra key) -> value``, most recent first."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._entries: list[tuple[tuple[weakref.ref, ...], tuple[int, ...], Any, Any]] = []

    def get(self, tensors: tuple[Tensor, ...], extra: Any) -> Any:
        """The value stored for ``tensors`` (the same objects, unwritten since) and ``extra``, or None."""
        versions = version_key(*tensors)
        if versions is None:
            return None
        for refs, seen, other, value in self._entries:
            if seen == versions and other == extra and all(r() is t for r, t in zip(refs, tensors, strict=True)):
                return value
        return None

    def put(self, tensors: tuple[Tensor, ...], extra: Any, value: Any) -> None:
        """Remember ``value`` for ``tensors`` and ``extra`` (nothing for inference tensors)."""
        versions = version_key(*tensors)
        if versions is None:
            return
        refs = tuple(weakref.ref(t, self._forget) for t in tensors)
        self._entries.insert(0, (refs, versions, extra, value))
        del self._entries[self.size:]

    def _forget(self, dead: weakref.ref) -> None:
        self._entries = [e for e in self._entries if all(r is not dead for r in e[0])]

    def clear(self) -> None:
        """Drop every entry."""
        self._entries = []
