"""What every check of ``ditorch info --probe`` uses (:mod:`ditorch.probe` states the contract; the checks of names
live there, the idioms in :mod:`ditorch.probe_idioms`): :class:`Wrong`, :func:`expect`, :func:`close` (judged by
:mod:`diopi.compare`) and :func:`on_device`."""

from __future__ import annotations

from typing import Any

import torch

from diopi.compare import Verdict, compare_tensors

__all__ = ["NBYTES", "Wrong", "close", "device_type", "expect", "on_device"]

NBYTES = 1 << 20  # the tensor the memory checks allocate


class Wrong(AssertionError):
    """The answer failed its check (the message says how, in a few words)."""


def expect(ok: Any, detail: str) -> None:
    if not ok:
        raise Wrong(detail)


def close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 1e-5, atol: float = 1e-6,
          reference: str = "the CPU's") -> None:
    """Raise :class:`Wrong` unless ``actual`` (any device) is within (rtol, atol) of ``expected``."""
    got, ref = actual.detach().cpu().double(), expected.detach().cpu().double()
    expect(got.shape == ref.shape, f"{what}: shape {tuple(got.shape)}, {reference} {tuple(ref.shape)}")
    judged = compare_tensors(got, ref, atol=atol, rtol=rtol)  # the project's one comparison engine
    if judged.verdict == Verdict.FAIL:
        raise Wrong(f"{what}: max abs diff {judged.max_abs_error:.3g} from {reference} (rtol {rtol:g}, atol {atol:g})")


def device_type() -> str:
    import ditorch

    return ditorch.adapter.device_type


def on_device(t: torch.Tensor, index: int | None = None) -> bool:
    return t.device.type == device_type() and (index is None or t.device.index == index)
