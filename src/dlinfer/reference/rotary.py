"""Reference rotary embedding (HF's ``rotate_half`` form, partial rotary allowed)."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

from ._memo import StepMemo

__all__ = ["apply_rotary_pos_emb", "apply_rotary_pos_emb_interleaved"]


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    rot = cos.shape[-1]
    if rot > x.shape[-1] or rot % 2:
        raise ValueError(f"apply_rotary_pos_emb: rotary_dim={rot} must be even and at most head_dim="
                         f"{x.shape[-1]}")
    if rot == x.shape[-1]:
        out = (x * cos) + (_rotate_half(x) * sin)
    else:
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        out = torch.cat(((x_rot * cos) + (_rotate_half(x_rot) * sin), x_pass), dim=-1)
    return out.to(x.dtype)


def _per_head(t: Tensor, x: Tensor) -> Tensor:
    """``(..., rotary_dim)`` -> ``(..., 1, rotary_dim)`` broadcast over ``x``'s head dimension."""
    return t if t.dim() == x.dim() else t.unsqueeze(-2)


#: the step's broadcast cos and sign-folded sin, once per step for all layers
_PREPARED = StepMemo()


def _prepared(cos: Tensor, sin: Tensor, dtype: torch.dtype, rank: int) -> tuple[Tensor, Tensor]:
    """``cos`` broadcast over the heads in ``dtype`` and ``sin`` with its first half negated (``rotate_half(x) *
    sin == swap_halves(x) * sin_signed``); the layers of a step pass the same cos/sin, so once per step."""
    found = _PREPARED.get((cos, sin), (dtype, rank))
    if found is not None:
        return found
    half = cos.shape[-1] // 2
    cos_b = cos if cos.dim() == rank else cos.unsqueeze(-2)
    sin_b = sin if sin.dim() == rank else sin.unsqueeze(-2)
    cos_b, sin_b = (t if t.dtype == dtype else t.to(dtype) for t in (cos_b, sin_b))
    found = (cos_b, torch.cat((-sin_b[..., :half], sin_b[..., half:]), dim=-1))
    _PREPARED.put((cos, sin), (dtype, rank), found)
    return found


@reference("apply_rotary_pos_emb")
def apply_rotary_pos_emb(query: Tensor, key: Tensor, cos: Tensor | None, sin: Tensor | None,
                         position_ids: Tensor | None, cos_sin_cache: Tensor | None) -> tuple[Tensor, Tensor]:
    """``x * cos + rotate_half(x) * sin`` on the first ``rotary_dim`` features of query and key."""
    if cos is not None and sin is not None:
        dim = query.shape[-1]
        if (cos.shape == sin.shape and cos.shape[-1] == dim == key.shape[-1] and dim % 2 == 0
                and query.dtype == key.dtype and query.shape[:-2] == key.shape[:-2]):
            # full width, query and key alike: rotated together in one pass over their heads side by side,
            # ``x * cos + swap_halves(x) * sin_signed`` (the products and the sum as HF computes them: the same bits)
            cos_b, sin_signed = _prepared(cos, sin, query.dtype, query.dim())
            both = torch.cat((query, key), dim=-2)
            out = both * cos_b + both.roll(dim // 2, -1) * sin_signed  # roll by half: the halves swapped
            return out.split_with_sizes((query.shape[-2], key.shape[-2]), dim=-2)
        if cos.shape != sin.shape:
            raise ValueError(f"apply_rotary_pos_emb: cos {tuple(cos.shape)} and sin {tuple(sin.shape)} differ")
    else:
        if position_ids is None or cos_sin_cache is None:
            raise ValueError("apply_rotary_pos_emb: give cos and sin, or position_ids and cos_sin_cache")
        if cos_sin_cache.dim() != 2:
            raise ValueError(f"apply_rotary_pos_emb: cos_sin_cache must be (max_position, rotary_dim), got "
                             f"{tuple(cos_sin_cache.shape)}")
        cos_half, sin_half = cos_sin_cache[position_ids.long()].chunk(2, dim=-1)
        cos = torch.cat((cos_half, cos_half), dim=-1)
        sin = torch.cat((sin_half, sin_half), dim=-1)
    cos_q, sin_q = _per_head(cos, query).to(query.dtype), _per_head(sin, query).to(query.dtype)
    cos_k, sin_k = _per_head(cos, key).to(key.dtype), _per_head(sin, key).to(key.dtype)
    return _rotate(query, cos_q, sin_q), _rotate(key, cos_k, sin_k)


def _pair_angles(t: Tensor, dim: int) -> Tensor:
    """``cos``/``sin`` ``(..., dim)`` with each pair's value repeated (``c0, c0, c1, c1, ...``) or ``(..., dim //
    2)`` with one value per pair -> one value per pair ``(..., dim // 2)``."""
    if t.shape[-1] == dim // 2:
        return t
    if t.shape[-1] != dim:
        raise ValueError(f"apply_rotary_pos_emb_interleaved: cos/sin last dimension {t.shape[-1]} must be the head "
                         f"dimension {dim} (each pair's value twice) or {dim // 2} (one per pair)")
    return t[..., 0::2]


@reference("apply_rotary_pos_emb_interleaved")
def apply_rotary_pos_emb_interleaved(x: Tensor, cos: Tensor, sin: Tensor, return_native_layout: bool) -> Tensor:
    """Rotate adjacent pairs ``(x[2i], x[2i+1])`` of ``x`` ``(tokens, heads, 1, dim)`` by the angle of pair ``i``
    (``cos``/``sin`` broadcast over the heads). ``return_native_layout`` gives the rotated pairs de-interleaved
    (first halves ``x'[2i]`` then second halves ``x'[2i+1]``, the half-split layout); otherwise the pairs stay
    adjacent, as in ``x``."""
    dim = x.shape[-1]
    if dim % 2:
        raise ValueError(f"apply_rotary_pos_emb_interleaved: head dimension {dim} must be even")
    c, s = _pair_angles(cos, dim).to(torch.float32), _pair_angles(sin, dim).to(torch.float32)
    xf = x.to(torch.float32)
    even, odd = xf[..., 0::2], xf[..., 1::2]
    first = even * c - odd * s
    second = odd * c + even * s
    if return_native_layout:
        out = torch.cat((first, second), dim=-1)
    else:
        out = torch.stack((first, second), dim=-1).flatten(-2)
    return out.to(x.dtype)
