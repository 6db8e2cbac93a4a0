"""Kernels put over the plugin's own, for the PrivateUse1 dispatch key, in the test process (``torch.library``).

A tool that claims to find a wrong operator must be shown a wrong operator on the plugin itself, not only on
our own simulated device: :func:`biased_gelu` is one (the right value plus :data:`BIAS`). :func:`mm_in_float64`
is a right kernel that rounds differently from the CPU's (computed in float64, rounded once), to show that the
noise-floor rule lets a difference in rounding through. :func:`recording` wraps a right kernel to see what the
device was given. Every kernel computes on host copies and returns a tensor on the input's device.

    with privateuse1_kernel("gelu", biased_gelu):
        F.gelu(torch.ones(2, device="openreg"))       # 0.8413 + 0.5
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: What :func:`biased_gelu` adds to every element.
BIAS = 0.5


@contextlib.contextmanager
def privateuse1_kernel(op: str, kernel: Callable[..., Any]) -> Iterator[None]:
    """``kernel`` is the PrivateUse1 implementation of ``aten::<op>`` inside the block; the plugin's after it."""
    library = torch.library.Library("aten", "IMPL")
    library.impl(op, kernel, "PrivateUse1")
    try:
        yield
    finally:
        library._destroy()


def biased_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``aten::gelu``, wrong: the CPU's value plus :data:`BIAS`."""
    return (torch.ops.aten.gelu.default(x.cpu(), approximate=approximate) + BIAS).to(x.device)


def mm_in_float64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``aten::mm``, right: the product in float64, rounded once to the inputs' dtype."""
    return (a.cpu().double() @ b.cpu().double()).to(a.dtype).to(a.device)


def recording(op: Callable[..., torch.Tensor], seen: list[tuple[tuple[int, ...], bool]]) -> Callable[..., Any]:
    """A kernel running ``op`` on host copies (layout kept) that appends each first input's stride and
    contiguity to ``seen``."""

    def kernel(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append((tuple(x.stride()), x.is_contiguous()))
        return op(x.cpu(), *args, **kwargs).to(x.device)

    return kernel
