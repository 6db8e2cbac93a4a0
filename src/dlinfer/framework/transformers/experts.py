"""The ``"dlinfer"`` experts implementation (transformers' ``ExpertsInterface``): ``fused_moe``."""

from __future__ import annotations

from torch import Tensor, nn

import dlinfer.ops as ops

__all__ = ["EXPERTS_NAME", "dlinfer_experts", "experts_layout_problem"]

EXPERTS_NAME = "dlinfer"


def experts_layout_problem(module: nn.Module) -> str | None:
    """Why an experts module's weights are not ``fused_moe``'s layout (None: they are): concatenated
    ``gate_up_proj (experts, 2 * intermediate, hidden)`` (gate rows first), ``down_proj (experts, hidden,
    intermediate)``, no bias, a gate."""
    for flag, wanted in (("is_transposed", False), ("has_bias", False), ("has_gate", True),
                         ("is_concatenated", True)):
        if getattr(module, flag, wanted) != wanted:
            return f"{flag}={not wanted}"
    if getattr(module, "has_post_expert_norm", False):
        return "has_post_expert_norm=True"
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(gate_up, Tensor) or not isinstance(down, Tensor) or gate_up.ndim != 3 or down.ndim != 3:
        return "no 3-D gate_up_proj/down_proj expert weights"
    if gate_up.shape[1] != 2 * down.shape[2] or gate_up.shape[2] != down.shape[1]:
        return f"gate_up_proj {tuple(gate_up.shape)} and down_proj {tuple(down.shape)} do not match"
    return None


def dlinfer_experts(module: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
    """``(tokens, hidden)`` through the routed experts with ``fused_moe``."""
    return ops.fused_moe(hidden_states, module.gate_up_proj, module.down_proj, top_k_weights, top_k_index,
                         top_k_index.shape[-1])
