"""Reference gated activation."""

from __future__ import annotations

import torch
from torch import Tensor

from ._table import reference

__all__ = ["silu_and_mul"]


@reference("silu_and_mul")
def silu_and_mul(input_tensor: Tensor, dim: int) -> Tensor:
    """``silu(gate) * up`` with ``gate, up = input_tensor.chunk(2, dim)``."""
    if input_tensor.shape[dim] % 2:
        raise ValueError(f"silu_and_mul: input dimension {dim} has odd size {input_tensor.shape[dim]}")
    gate, up = input_tensor.chunk(2, dim=dim)
    return torch.nn.functional.silu(gate) * up
