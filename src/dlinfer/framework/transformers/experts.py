"""The ``"dlinfer"`` experts implementation (transformers' ``ExpertsInterface``): ``fused_moe``."""

from __future__ import annotations

from torch import Tensor, nn

import dlinfer.ops as ops

__all__ = ["EXPERTS_NAME", "check_experts", "dlinfer_experts"]

EXPERTS_NAME = "dlinfer"


def check_experts(module: nn.Module) -> None:
    """Raise a one-line error when an experts module's weight layout is not ``fused_moe``'s: concatenated
    ``gate_up_proj (experts, 2 * intermediate, hidden)`` (gate rows first), ``down_proj (experts, hidden,
    intermediate)``, no bias, SiLU gate."""
    name = type(module).__name__
    for flag, wanted in (("is_transposed", False), ("has_bias", False), ("has_gate", True),
                         ("is_concatenated", True)):
        if getattr(module, flag, wanted) != wanted:
            raise ValueError(f"dlinfer fused_moe: {name} has {flag}={not wanted}, unsupported expert layout")
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(gate_up, Tensor) or not isinstance(down, Tensor) or gate_up.ndim != 3 or down.ndim != 3:
        raise ValueError(f"dlinfer fused_moe: {name} lacks 3-D gate_up_proj/down_proj expert weights")
    if gate_up.shape[1] != 2 * down.shape[2] or gate_up.shape[2] != down.shape[1]:
        raise ValueError(f"dlinfer fused_moe: {name} weights gate_up_proj {tuple(gate_up.shape)} and down_proj"
                         f" {tuple(down.shape)} do not match")
    act = getattr(getattr(module, "config", None), "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"dlinfer fused_moe: {name} uses activation {act!r}, fused_moe computes SiLU")


def dlinfer_experts(module: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
    """``(tokens, hidden)`` through the routed experts with ``fused_moe``."""
    return ops.fused_moe(hidden_states, module.gate_up_proj, module.down_proj, top_k_weights, top_k_index,
                         top_k_index.shape[-1])
