"""Reference dense linear, with the tensor-parallel sum."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

__all__ = ["all_reduce_sum", "linear"]


def all_reduce_sum(out: Tensor, op: str) -> Tensor:
    """Sum ``out`` over the default process group (in place); a clear error without one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{op}: all_reduce=True needs an initialized torch.distributed default process group")
    dist.all_reduce(out)
    return out


@reference("linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None, all_reduce: bool) -> Tensor:
    """``x @ weight.T + bias``, summed over the process group when ``all_reduce``."""
    if weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(f"linear: weight {tuple(weight.shape)} must be (out, {x.shape[-1]})")
    out = torch.nn.functional.linear(x, weight, bias)
    return all_reduce_sum(out, "linear") if all_reduce else out
