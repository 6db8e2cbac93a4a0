"""Reference mixture of experts, in HF's Mixtral/Qwen3-MoE order: softmax in float32, top-k, optional
renormalization; experts visited in ascending order, each on its tokens, results added with ``index_add_``."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

from ._checks import check_rank

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


#: the grouped matrix multiply (one call for all experts' rows), where this torch has one; the dtypes it takes on
#: the CPU (other devices take fewer: CUDA's needs bfloat16, so they keep the per-expert loop)
_GROUPED_MM = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
_GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _aligned(hidden_states: Tensor, gate_up_weights: Tensor, down_weights: Tensor) -> bool:
    """Whether the grouped multiply takes these operands: CPU tensors, every row stride and start a multiple of 16
    bytes."""
    size = hidden_states.element_size()
    return (hidden_states.device.type == "cpu" and hidden_states.shape[1] * size % 16 == 0
            and down_weights.shape[2] * size % 16 == 0
            and all(t.data_ptr() % 16 == 0 and t.is_contiguous() for t in (gate_up_weights, down_weights)))


def _grouped(hidden_states: Tensor, gate_up_weights: Tensor, down_weights: Tensor, weights: Tensor, ids: Tensor,
             topk: int) -> Tensor:
    """``fused_moe`` with the (token, expert) pairs sorted by expert and one grouped multiply per projection, the
    weighted results summed over each token's experts in their top-k order (transformers' grouped_mm order)."""
    num_experts = gate_up_weights.shape[0]
    flat = ids.reshape(-1)
    _, order = torch.sort(flat)
    counts = torch.bincount(flat, minlength=num_experts)
    if counts.shape[0] != num_experts:
        raise ValueError(f"fused_moe: topk_ids hold an expert id >= num_experts ({num_experts})")
    offsets = counts.cumsum(0, dtype=torch.int32)
    rows = hidden_states.index_select(0, order // topk)
    gate, up = _GROUPED_MM(rows, gate_up_weights.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
    out = _GROUPED_MM(torch.nn.functional.silu(gate) * up, down_weights.transpose(-2, -1), offs=offsets)
    out = out * weights.reshape(-1).index_select(0, order).unsqueeze(-1)
    out = torch.empty_like(out).index_copy_(0, order, out)  # back in (token, k) order
    return out.view(hidden_states.shape[0], topk, -1).sum(dim=1)


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
    if _GROUPED_MM is not None and hidden_states.dtype in _GROUPED_DTYPES and hidden_states.shape[0] and _aligned(
            hidden_states, gate_up_weights, down_weights):
        return _grouped(hidden_states, gate_up_weights, down_weights, weights, ids, topk)
    out = torch.zeros_like(hidden_states)
    mask = torch.nn.functional.one_hot(ids, num_classes=num_experts).permute(2, 1, 0)     # (E, topk, T)
    hit = torch.nonzero(mask.sum(dim=(1, 2)) > 0).flatten().tolist()
    for e in hit:
        pos, tokens = torch.where(mask[e])
        gate, up = torch.nn.functional.linear(hidden_states[tokens], gate_up_weights[e]).chunk(2, dim=-1)
        h = torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, down_weights[e])
        out.index_add_(0, tokens, (h * weights[tokens, pos, None]).to(out.dtype))
    return out
