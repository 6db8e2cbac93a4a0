"""Reference RMS norms, in HF LlamaRMSNorm's operation order: float32 statistics, back to the input dtype, then
times the weight."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

__all__ = ["add_rms_norm", "rms_norm"]


@reference("rms_norm")
def rms_norm(hidden_states: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    """``weight * (x * rsqrt(mean(x^2) + eps))``, statistics in float32."""
    if weight.shape[-1] != hidden_states.shape[-1]:
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} does not match the last dimension of "
                         f"hidden_states {tuple(hidden_states.shape)}")
    dtype = hidden_states.dtype
    if dtype == torch.float32 and weight.dtype == torch.float32:
        # x * rsqrt(mean(x^2) + eps), then * weight: one call (products commute bit for bit)
        return torch.rms_norm(hidden_states, (hidden_states.shape[-1],), weight, epsilon)
    x = hidden_states if dtype == torch.float32 else hidden_states.to(torch.float32)
    normed = torch.rms_norm(x, (x.shape[-1],), None, epsilon)
    out = weight * (normed if dtype == torch.float32 else normed.to(dtype))
    return out if out.dtype == dtype else out.to(dtype)


@reference("add_rms_norm")
def add_rms_norm(hidden_states: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """``(rms_norm(hidden_states + residual), hidden_states + residual)``."""
    if residual.shape != hidden_states.shape:
        raise ValueError(f"add_rms_norm: residual {tuple(residual.shape)} does not match hidden_states "
                         f"{tuple(hidden_states.shape)}")
    added = hidden_states + residual
    return rms_norm(added, weight, epsilon), added
