"""Cheap argument checks shared by the reference kernels (shape comparisons only, no device syncs)."""

from __future__ import annotations

from torch import Tensor

__all__ = ["check_heads", "check_quant_bits", "check_rank"]


def check_rank(op: str, name: str, t: Tensor, rank: int) -> None:
    """``ValueError`` naming ``name`` unless ``t`` has ``rank`` dimensions."""
    if t.dim() != rank:
        raise ValueError(f"{op}: {name} must have {rank} dimensions, got shape {tuple(t.shape)}")


def check_heads(op: str, num_q_heads: int, num_kv_heads: int, query: Tensor, key: Tensor) -> None:
    """Grouped-query head layout: query ``(..., num_q_heads, head_dim)``, key/cache ``(..., num_kv_heads,
    head_dim)``, ``num_q_heads`` a multiple of ``num_kv_heads``."""
    if num_kv_heads <= 0 or num_q_heads % num_kv_heads != 0:
        raise ValueError(f"{op}: num_q_heads={num_q_heads} must be a positive multiple of "
                         f"num_kv_heads={num_kv_heads}")
    if query.shape[-2] != num_q_heads:
        raise ValueError(f"{op}: query has {query.shape[-2]} heads (shape {tuple(query.shape)}), "
                         f"num_q_heads={num_q_heads}")
    if key.shape[-2] != num_kv_heads:
        raise ValueError(f"{op}: key/key_cache has {key.shape[-2]} heads (shape {tuple(key.shape)}), "
                         f"num_kv_heads={num_kv_heads}")
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(f"{op}: head_dim mismatch between query {tuple(query.shape)} and key/key_cache "
                         f"{tuple(key.shape)}")


def check_quant_bits(op: str, quant_bits: int) -> None:
    """Only 0 (no quantization) and 8 (int8 cache) are supported."""
    if quant_bits not in (0, 8):
        raise ValueError(f"{op}: quant_bits={quant_bits} is not supported (0 or 8)")
