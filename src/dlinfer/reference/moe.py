"""Reference mixture of experts, in HF's Mixtral/Qwen3-MoE order: softmax in float32, top-k, optional
renormalization; experts visited in ascending order, each on its tokens, results added with ``index_add_``."""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_rank
from ._table import reference

__all__ = ["fused_moe", "moe_gating_topk_softmax"]


@reference("moe_gating_topk_softmax")
def moe_gating_topk_softmax(router_logits: Tensor, topk: int, renormalize: bool) -> tuple[Tensor, Tensor]:
    """``(weights float32, expert ids int64)`` of the ``topk`` most probable experts per token."""
    if not 0 < topk <= router_logits.shape[-1]:
        raise ValueError(f"moe_gating_topk_softmax: topk={topk} must be in 1..{router_logits.shape[-1]} "
                         "(the number of experts)")
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int64)


@reference("fused_moe")
def fused_moe(hidden_states: Tensor, gate_up_weights: Tensor, down_weights: Tensor, topk_weights: Tensor,
              topk_ids: Tensor, topk: int, renormalize: bool) -> Tensor:
    """``sum_k topk_weights[:, k] * down_e(silu(gate_e x) * up_e x)`` with ``e = topk_ids[:, k]``."""
    op = "fused_moe"
    check_rank(op, "hidden_states", hidden_states, 2)
    check_rank(op, "gate_up_weights", gate_up_weights, 3)
    check_rank(op, "down_weights", down_weights, 3)
    num_experts, two_inter, hidden = gate_up_weights.shape
    if hidden != hidden_states.shape[1] or two_inter % 2:
        raise ValueError(f"{op}: gate_up_weights {tuple(gate_up_weights.shape)} must be (num_experts, "
                         f"2 * intermediate, {hidden_states.shape[1]})")
    if down_weights.shape != (num_experts, hidden, two_inter // 2):
        raise ValueError(f"{op}: down_weights {tuple(down_weights.shape)} must be "
                         f"{(num_experts, hidden, two_inter // 2)}")
    expected = (hidden_states.shape[0], topk)
    if topk_ids.shape != expected or topk_weights.shape != expected:
        raise ValueError(f"{op}: topk_weights {tuple(topk_weights.shape)} and topk_ids {tuple(topk_ids.shape)} "
                         f"must be {expected}")
    weights = topk_weights
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(hidden_states.dtype)
    ids = topk_ids.long()
    out = torch.zeros_like(hidden_states)
    mask = torch.nn.functional.one_hot(ids, num_classes=num_experts).permute(2, 1, 0)     # (E, topk, T)
    hit = torch.nonzero(mask.sum(dim=(1, 2)) > 0).flatten().tolist()
    for e in hit:
        pos, tokens = torch.where(mask[e])
        gate, up = torch.nn.functional.linear(hidden_states[tokens], gate_up_weights[e]).chunk(2, dim=-1)
        h = torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, down_weights[e])
        out.index_add_(0, tokens, (h * weights[tokens, pos, None]).to(out.dtype))
    return out
