"""The version key of the per-step memos (the decode layout, the rotary cos/sin, host-to-device length copies)."""

from __future__ import annotations

from torch import Tensor

__all__ = ["version_key"]


def version_key(*tensors: Tensor) -> tuple[int, ...] | None:
    """The tensors' version counters, or None when one of them is an inference tensor (made under
    ``torch.inference_mode()``, as LMDeploy's are): those track no version, so nothing is memoised on them."""
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(t._version for t in tensors)
