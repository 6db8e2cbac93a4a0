"""Reference gated activation."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

__all__ = ["silu_and_mul"]


@reference("silu_and_mul")
def silu_and_mul(input_tensor: Tensor, dim: int) -> Tensor:
    """``silu(gate) * up`` with ``gate, up = input_tensor.chunk(2, dim)``."""
    size = input_tensor.shape[dim]
    if size % 2:
        raise ValueError(f"silu_and_mul: input dimension {dim} has odd size {size}")
    return _silu(input_tensor.narrow(dim, 0, size // 2)) * input_tensor.narrow(dim, size // 2, size // 2)


_silu = torch._C._nn.silu  # F.silu without its Python wrapper (no in-place, no torch-function override here)
