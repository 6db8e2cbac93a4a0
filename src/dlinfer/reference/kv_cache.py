"""Reference paged KV cache writes and reads, with the int8 cache scheme of ``dlinfer.ops.llm``:
per (token, kv head), asymmetric, ``scale = (max - min) / 255``, ``q = clamp(round(x / scale) + zero, -128, 127)``
with the integer-valued ``zero = round(-min / scale) - 128``, so ``x ~= (q - zero) * scale``."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

from ._checks import check_quant_bits, check_rank

__all__ = ["check_fill_kv_cache", "dequantize_kv", "fill_kv_cache", "gather_kv", "quantize_kv"]

# a row whose values are all equal gets this scale (its values still round-trip within scale / 2 of the zero's
# float32 rounding)
_MIN_SCALE = 1e-8


def quantize_kv(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(q int8, scale float32, zero float32)`` of ``x`` ``(..., head_dim)``; scale and zero ``(...)``."""
    xf = x.to(torch.float32)
    lo, hi = xf.amin(-1), xf.amax(-1)
    scale = ((hi - lo) / 255).clamp_min(_MIN_SCALE)
    zero = torch.round(-lo / scale) - 128
    q = (torch.round(xf / scale.unsqueeze(-1)) + zero.unsqueeze(-1)).clamp(-128, 127).to(torch.int8)
    return q, scale, zero


def dequantize_kv(q: Tensor, scale: Tensor, zero: Tensor, dtype: torch.dtype) -> Tensor:
    """``(q - zero) * scale`` in ``dtype``; ``scale``/``zero`` have ``q``'s shape without the last dimension."""
    return ((q.to(torch.float32) - zero.unsqueeze(-1)) * scale.unsqueeze(-1)).to(dtype)


def check_fill_kv_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, kv_indices: Tensor,
                        k_scale: Tensor | None, k_zero: Tensor | None, v_scale: Tensor | None, v_zero: Tensor | None,
                        quant_bits: int) -> None:
    """``fill_kv_cache``'s argument checks (shared with vendor kernels): ``ValueError`` naming the argument."""
    ks, vs = key.shape, value.shape
    if (quant_bits == 0 and len(ks) == 3 and key_cache.dim() == 4 and vs[:2] == ks[:2]
            and ks[1:] == key_cache.shape[2:] and vs[1:] == value_cache.shape[2:] and kv_indices.shape == ks[:1]):
        return  # the common case in one expression; otherwise the check that fails names the argument
    op = "fill_kv_cache"
    check_quant_bits(op, quant_bits)
    check_rank(op, "key", key, 3)
    check_rank(op, "key_cache", key_cache, 4)
    if value.shape[:2] != key.shape[:2]:
        raise ValueError(f"{op}: value {tuple(value.shape)} does not match key {tuple(key.shape)}")
    if key.shape[1:] != key_cache.shape[2:]:
        raise ValueError(f"{op}: key {tuple(key.shape)} does not fit key_cache {tuple(key_cache.shape)} "
                         "(num_kv_heads, head_dim)")
    if value.shape[1:] != value_cache.shape[2:]:
        raise ValueError(f"{op}: value {tuple(value.shape)} does not fit value_cache {tuple(value_cache.shape)}")
    if kv_indices.shape != (key.shape[0],):
        raise ValueError(f"{op}: kv_indices must be one flat slot per token ({key.shape[0]},), got "
                         f"{tuple(kv_indices.shape)}")
    if quant_bits == 0:
        return
    if key_cache.dtype != torch.int8 or value_cache.dtype != torch.int8:
        raise ValueError(f"{op}: quant_bits=8 needs int8 caches, got {key_cache.dtype}/{value_cache.dtype}")
    for name, t in (("k_scale", k_scale), ("k_zero", k_zero), ("v_scale", v_scale), ("v_zero", v_zero)):
        if t is None or t.shape != key_cache.shape[:3]:
            raise ValueError(f"{op}: quant_bits=8 needs {name} of shape {tuple(key_cache.shape[:3])}, got "
                             f"{None if t is None else tuple(t.shape)}")


@reference("fill_kv_cache")
def fill_kv_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, kv_indices: Tensor,
                  k_scale: Tensor | None, k_zero: Tensor | None, v_scale: Tensor | None, v_zero: Tensor | None,
                  quant_bits: int) -> None:
    """Write each token's key/value at its flat slot ``kv_indices[t] = block * block_size + slot`` (in place)."""
    check_fill_kv_cache(key, value, key_cache, value_cache, kv_indices, k_scale, k_zero, v_scale, v_zero,
                        quant_bits)
    slots = key_cache.shape[0] * key_cache.shape[1]
    idx = kv_indices if kv_indices.dtype == torch.int64 else kv_indices.long()
    flat_k = key_cache.view((slots, *key_cache.shape[2:]))  # a view (a copy would lose the writes)
    flat_v = value_cache.view((slots, *value_cache.shape[2:]))
    # no bounds check up front (it would cost a device sync per call): index_copy_ checks the indices and its
    # error is turned into one that names kv_indices
    try:
        if quant_bits == 0:
            flat_k.index_copy_(0, idx, key if key.dtype == key_cache.dtype else key.to(key_cache.dtype))
            flat_v.index_copy_(0, idx, value if value.dtype == value_cache.dtype else value.to(value_cache.dtype))
            return
        for x, flat, s, z in ((key, flat_k, k_scale, k_zero), (value, flat_v, v_scale, v_zero)):
            q, scale, zero = quantize_kv(x)
            flat.index_copy_(0, idx, q)
            s.view(slots, -1).index_copy_(0, idx, scale.to(s.dtype))
            z.view(slots, -1).index_copy_(0, idx, zero.to(z.dtype))
    except (IndexError, RuntimeError) as exc:
        if idx.numel() and bool(((idx < 0) | (idx >= slots)).any()):
            raise ValueError(f"fill_kv_cache: kv_indices out of the cache's {slots} slots") from None
        raise exc


def gather_kv(cache: Tensor, block_table: Tensor, block_size: int, length: int, scale: Tensor | None = None,
              zero: Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
    """The first ``length`` positions of every sequence of ``block_table`` as a dense ``(batch, length,
    num_kv_heads, head_dim)`` tensor; an int8 cache is dequantized with ``scale``/``zero`` into ``dtype``."""
    if cache.shape[1] != block_size:
        raise ValueError(f"block_size={block_size} does not match the cache's block dimension "
                         f"{tuple(cache.shape)}")
    num = -(-length // block_size)
    if block_table.shape[1] < num:
        raise ValueError(f"block_table has {block_table.shape[1]} blocks per sequence, fewer than the "
                         f"{num} that {length} positions of block_size {block_size} need")
    blocks = block_table[:, :num].reshape(-1).long()
    batch = block_table.shape[0]
    dense = cache.index_select(0, blocks).view(batch, num * block_size, *cache.shape[2:])[:, :length]
    if scale is None or zero is None:
        return dense
    s = scale.index_select(0, blocks).view(batch, num * block_size, -1)[:, :length]
    z = zero.index_select(0, blocks).view(batch, num * block_size, -1)[:, :length]
    return dequantize_kv(dense, s, z, dtype or torch.float32)
