"""Reference attention kernels: prefill over token-packed sequences, and decode/prefill over the paged cache.

Sequences are padded into one batch (no per-token Python loops) and computed by one
``scaled_dot_product_attention`` call with an additive mask; with ALiBi or soft-capping in eager attention's
order, as HF's ``eager_attention_forward``: ``(q @ k^T) * scale`` in the input dtype, masked, softmax in float32,
back to the input dtype, ``@ v``. Grouped-query heads: query head ``h`` reads kv head
``h // (num_q_heads // num_kv_heads)``.
``alibi_slopes`` (one per query head) add ``slope * (key_pos - query_pos)`` to the scores before masking;
``logit_softcapping`` (Gemma-2) caps the scaled scores as ``cap * tanh(scores / cap)`` first. ``sliding_window``
``w`` lets a query at position ``p`` see only keys at ``p - w < k <= p`` (transformers' rule). Decode without
ALiBi or softcapping is one ``scaled_dot_product_attention`` call over the gathered blocks (the decode hot path),
or over the cache itself, read as a strided view, when a host block table has consecutive blocks per sequence and
evenly spaced rows (a pool reserved per sequence up front).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from dlinfer.registry import reference

from ._checks import check_heads, check_quant_bits, check_rank
from ._memo import StepMemo
from .kv_cache import gather_kv

__all__ = ["check_paged_decode", "check_paged_prefill", "check_prefill", "paged_decode_attention",
           "paged_prefill_attention", "prefill_attention"]


def _attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float | None,
            alibi: Tensor | None, q_pos: Tensor, k_pos: Tensor, softcap: float | None = None) -> Tensor:
    """q ``(B, L, Hq, D)``, k/v ``(B, S, Hkv, D)``, allowed ``(B, [H,] L, S)`` bool; ``q_pos (B, L)``, ``k_pos
    (S,)`` positions for alibi. Returns ``(B, L, Hq, Dv)``."""
    batch, length, hq, dim = q.shape
    hkv = k.shape[2]
    groups = hq // hkv
    qh = q.transpose(1, 2)                                                   # (B, Hq, L, D)
    kh = k.transpose(1, 2)[:, :, None].expand(-1, -1, groups, -1, -1).reshape(batch, hq, -1, dim)
    vh = v.transpose(1, 2)[:, :, None].expand(-1, -1, groups, -1, -1).reshape(batch, hq, -1, v.shape[-1])
    scores = torch.matmul(qh, kh.transpose(2, 3)) * (1.0 / math.sqrt(dim) if scale is None else scale)
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.to(torch.float32)
    if alibi is not None:
        rel = (k_pos.view(1, 1, -1) - q_pos.unsqueeze(-1)).to(torch.float32)  # (B, L, S)
        scores = scores + alibi.view(1, hq, 1, 1) * rel.unsqueeze(1)
    if allowed.dim() == 3:
        allowed = allowed.unsqueeze(1)
    scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
    probs = torch.softmax(scores, dim=-1).to(q.dtype)
    return torch.matmul(probs, vh).transpose(1, 2)                           # (B, L, Hq, Dv)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float | None) -> Tensor:
    """q ``(B, L, Hq, D)``, k/v ``(B, S, Hkv, D)``, allowed ``(B, L, S)``: one fused attention call (no ALiBi, no
    soft-capping); a row with no allowed key (padding) comes out as garbage the caller drops."""
    mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=mask.unsqueeze(1), scale=scale,
                                         enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


def _alibi(op: str, slopes: Sequence[float] | None, hq: int, device: torch.device) -> Tensor | None:
    if slopes is None:
        return None
    if len(slopes) != hq:
        raise ValueError(f"{op}: alibi_slopes has {len(slopes)} values, one per query head ({hq}) expected")
    return torch.tensor(list(slopes), dtype=torch.float32, device=device)


def _token_layout(q_start_loc: Tensor, q_seq_len: Tensor, num_tokens: int,
                  max_q: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(seq_of_token, index_in_seq, gather (B, max_q) token indices, valid (B, max_q))``."""
    batch = q_seq_len.shape[0]
    device = q_seq_len.device
    lens = q_seq_len.long()
    starts = q_start_loc.long()
    seq = torch.repeat_interleave(torch.arange(batch, device=device), lens, output_size=num_tokens)
    index = torch.arange(num_tokens, device=device) - starts[seq]
    ar = torch.arange(max_q, device=device)
    valid = ar.unsqueeze(0) < lens.unsqueeze(1)
    gather = (starts.unsqueeze(1) + ar.unsqueeze(0)).clamp(0, max(num_tokens - 1, 0))
    return seq, index, gather, valid


def _window(allowed: Tensor, q_pos: Tensor, k_pos: Tensor, window: int | None) -> Tensor:
    """``allowed`` ``(B, L, S)`` with the keys more than ``window - 1`` positions behind each query removed;
    ``q_pos`` ``(B, L)`` or ``(L,)``, ``k_pos`` ``(S,)``."""
    if window is None:
        return allowed
    if window <= 0:
        raise ValueError(f"sliding_window={window} must be a positive number of positions")
    if q_pos.dim() == 1:
        q_pos = q_pos.unsqueeze(0)
    return allowed & (k_pos.view(1, 1, -1) > q_pos.unsqueeze(-1) - window)


def _user_masks(op: str, masks: Sequence[Tensor | None], default: Tensor) -> Tensor:
    """Replace sequence ``b``'s rule in ``default`` ``(B, L, S)`` by ``masks[b]`` (True = not allowed)."""
    if len(masks) != default.shape[0]:
        raise ValueError(f"{op}: attn_mask has {len(masks)} masks, one per sequence ({default.shape[0]}) expected")
    allowed = default.clone()
    for b, m in enumerate(masks):
        if m is None:
            continue
        ql, kl = m.shape[-2], m.shape[-1]
        if ql > allowed.shape[1] or kl > allowed.shape[2]:
            raise ValueError(f"{op}: attn_mask[{b}] of shape {tuple(m.shape)} is larger than the sequence")
        sub = ~m.to(torch.bool)
        while sub.dim() > 2:
            sub = sub.all(0)
        allowed[b, :ql, :kl] = sub
        allowed[b, :ql, kl:] = False
    return allowed


def _check_lengths(op: str, q_start_loc: Tensor, q_seq_len: Tensor) -> None:
    check_rank(op, "q_seq_len", q_seq_len, 1)
    if q_start_loc.shape != q_seq_len.shape:
        raise ValueError(f"{op}: q_start_loc {tuple(q_start_loc.shape)} and q_seq_len {tuple(q_seq_len.shape)} "
                         "must both be (batch,)")


def check_prefill(query: Tensor, key: Tensor, value: Tensor, q_start_loc: Tensor, q_seq_len: Tensor,
                  num_q_heads: int, num_kv_heads: int) -> None:
    """``prefill_attention``'s shape checks (shared with vendor kernels)."""
    op = "prefill_attention"
    check_rank(op, "query", query, 3)
    check_rank(op, "key", key, 3)
    check_heads(op, num_q_heads, num_kv_heads, query, key)
    if key.shape[0] != query.shape[0] or value.shape[:2] != key.shape[:2]:
        raise ValueError(f"{op}: key {tuple(key.shape)} / value {tuple(value.shape)} must have query's "
                         f"{query.shape[0]} tokens and num_kv_heads heads")
    _check_lengths(op, q_start_loc, q_seq_len)


def check_paged_decode(query: Tensor, key_cache: Tensor, block_table: Tensor, block_size: int, kv_seq_len: Tensor,
                       max_kv_seq_len: int, num_q_heads: int, num_kv_heads: int) -> None:
    """``paged_decode_attention``'s shape checks (shared with vendor kernels)."""
    qs, cs, ts = query.shape, key_cache.shape, block_table.shape
    if (len(qs) == 3 and len(cs) == 4 and len(ts) == 2 and kv_seq_len.dim() == 1 and num_kv_heads > 0
            and num_q_heads % num_kv_heads == 0 and qs[1] == num_q_heads and cs[2] == num_kv_heads
            and cs[3] == qs[2] and ts[0] == qs[0] and kv_seq_len.shape[0] == qs[0] and cs[1] == block_size
            and ts[1] * block_size >= max_kv_seq_len):
        return  # the common case in one expression; otherwise the check that fails names the argument
    op = "paged_decode_attention"
    check_rank(op, "query", query, 3)
    check_rank(op, "key_cache", key_cache, 4)
    check_heads(op, num_q_heads, num_kv_heads, query, key_cache)
    check_rank(op, "kv_seq_len", kv_seq_len, 1)
    check_rank(op, "block_table", block_table, 2)
    if block_table.shape[0] != query.shape[0] or kv_seq_len.shape[0] != query.shape[0]:
        raise ValueError(f"{op}: block_table {tuple(block_table.shape)} and kv_seq_len {tuple(kv_seq_len.shape)} "
                         f"must have one row per query ({query.shape[0]})")
    _check_table(op, key_cache, block_table, block_size, max_kv_seq_len)


def check_paged_prefill(query: Tensor, key_cache: Tensor, block_table: Tensor, block_size: int,
                        q_start_loc: Tensor, q_seq_len: Tensor, kv_seq_len: Tensor, num_q_heads: int,
                        num_kv_heads: int) -> None:
    """``paged_prefill_attention``'s shape checks (shared with vendor kernels)."""
    op = "paged_prefill_attention"
    check_rank(op, "query", query, 3)
    check_rank(op, "key_cache", key_cache, 4)
    check_heads(op, num_q_heads, num_kv_heads, query, key_cache)
    _check_lengths(op, q_start_loc, q_seq_len)
    check_rank(op, "block_table", block_table, 2)
    if kv_seq_len.shape != q_seq_len.shape or block_table.shape[0] != q_seq_len.shape[0]:
        raise ValueError(f"{op}: kv_seq_len {tuple(kv_seq_len.shape)} and block_table {tuple(block_table.shape)} "
                         f"must have one row per sequence ({q_seq_len.shape[0]})")
    _check_table(op, key_cache, block_table, block_size, 0)  # the block size; the kernels check the length


def _check_table(op: str, key_cache: Tensor, block_table: Tensor, block_size: int, length: int) -> None:
    if key_cache.shape[1] != block_size:
        raise ValueError(f"{op}: block_size={block_size} does not match key_cache {tuple(key_cache.shape)}")
    need = -(-length // block_size)
    if block_table.shape[1] < need:
        raise ValueError(f"{op}: block_table has {block_table.shape[1]} blocks per sequence, fewer than the {need} "
                         f"that {length} positions of block_size {block_size} need")


#: the prefill step's layout (padding gather, unpacking index, additive mask), once per step for all layers
_PREFILL_LAYOUT = StepMemo()


def _prefill_layout(q_start_loc: Tensor, q_seq_len: Tensor, num_tokens: int, max_q: int, window: int | None,
                    dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(padding gather (B * max_q,) token indices, unpacking index (num_tokens,) into the padded rows, additive
    mask (B, 1, max_q, max_q) in dtype or None)`` of a prefill step; the layers of one step pass the same
    lengths, so the layout is computed once per step. The sequences are padded at their ends, so plain causal
    attention needs no mask: a real query sees keys up to its own position, all real; only the padding rows
    (dropped) see padding keys. A sliding window needs the mask."""
    extra = (num_tokens, max_q, window, dtype)
    found = _PREFILL_LAYOUT.get((q_start_loc, q_seq_len), extra)
    if found is not None:
        return found
    batch = q_seq_len.shape[0]
    pos = torch.arange(max_q, device=q_seq_len.device)
    gather = (q_start_loc.view(-1, 1) + pos).clamp_(max=max(num_tokens - 1, 0)).view(-1)
    # packed token t of sequence b sits at padded row b * max_q + (t - start_b)
    shift = torch.repeat_interleave(torch.arange(batch, device=pos.device) * max_q - q_start_loc, q_seq_len,
                                    output_size=num_tokens)
    unpack = shift + torch.arange(num_tokens, device=pos.device)
    mask = None
    if window is not None:
        allowed = _window((pos.view(1, -1) <= pos.view(-1, 1)).unsqueeze(0), pos, pos, window)
        mask = torch.where(allowed, 0.0, float("-inf")).to(dtype).unsqueeze(1)
    found = (gather, unpack, mask)
    _PREFILL_LAYOUT.put((q_start_loc, q_seq_len), extra, found)
    return found


@reference("prefill_attention")
def prefill_attention(query: Tensor, key: Tensor, value: Tensor, q_start_loc: Tensor, q_seq_len: Tensor,
                      max_q_seq_len: int, num_q_heads: int, num_kv_heads: int, attn_mask: list[Tensor | None],
                      softmax_scale: float | None, alibi_slopes: list[float] | None,
                      sliding_window: int | None = None, logit_softcapping: float | None = None) -> Tensor:
    """Causal attention of every packed sequence over its own keys."""
    op = "prefill_attention"
    check_prefill(query, key, value, q_start_loc, q_seq_len, num_q_heads, num_kv_heads)
    num_tokens = query.shape[0]
    if not attn_mask and alibi_slopes is None and not logit_softcapping:
        # the hot path: the step's padding layout and mask are the same for every layer (memoised); the sequences
        # padded into one batch by one gather each, one fused attention call, the real rows picked back
        gather, unpack, mask = _prefill_layout(q_start_loc, q_seq_len, num_tokens, max_q_seq_len, sliding_window,
                                               query.dtype)
        batch = q_seq_len.shape[0]
        q = query.index_select(0, gather).view(batch, max_q_seq_len, num_q_heads, -1).transpose(1, 2)
        k = key.index_select(0, gather).view(batch, max_q_seq_len, num_kv_heads, -1).transpose(1, 2)
        v = value.index_select(0, gather).view(batch, max_q_seq_len, num_kv_heads, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=softmax_scale,
                                             enable_gqa=num_q_heads != num_kv_heads)
        return out.transpose(1, 2).reshape(batch * max_q_seq_len, num_q_heads, -1).index_select(0, unpack)
    seq, index, gather, valid = _token_layout(q_start_loc, q_seq_len, num_tokens, max_q_seq_len)
    pos = torch.arange(max_q_seq_len, device=query.device)
    allowed = (pos.view(1, -1) <= pos.view(-1, 1)).unsqueeze(0) & valid.unsqueeze(1)    # (B, L, S)
    allowed = _window(allowed, pos, pos, sliding_window)
    if attn_mask:
        allowed = _user_masks(op, attn_mask, allowed)
    if alibi_slopes is None and not logit_softcapping:
        return _sdpa(query[gather], key[gather], value[gather], allowed, softmax_scale)[seq, index]
    alibi = _alibi(op, alibi_slopes, num_q_heads, query.device)
    out = _attend(query[gather], key[gather], value[gather], allowed, softmax_scale, alibi,
                  pos.unsqueeze(0).expand(gather.shape[0], -1), pos, logit_softcapping)
    return out[seq, index]


def _quant_args(op: str, quant_bits: int, key_cache: Tensor, k_scale: Tensor | None, k_zero: Tensor | None,
                v_scale: Tensor | None, v_zero: Tensor | None) -> bool:
    check_quant_bits(op, quant_bits)
    if quant_bits == 0:
        return False
    for name, t in (("k_scale", k_scale), ("k_zero", k_zero), ("v_scale", v_scale), ("v_zero", v_zero)):
        if t is None or t.shape != key_cache.shape[:3]:
            raise ValueError(f"{op}: quant_bits=8 needs {name} of shape {tuple(key_cache.shape[:3])} (kv_scales/"
                             f"kv_zeros), got {None if t is None else tuple(t.shape)}")
    return True


def _gather_pair(key_cache: Tensor, value_cache: Tensor, block_table: Tensor, block_size: int, length: int,
                 quant: bool, scales: tuple, dtype: torch.dtype, op: str) -> tuple[Tensor, Tensor]:
    check_rank(op, "block_table", block_table, 2)
    try:
        if quant:
            k_scale, k_zero, v_scale, v_zero = scales
            return (gather_kv(key_cache, block_table, block_size, length, k_scale, k_zero, dtype),
                    gather_kv(value_cache, block_table, block_size, length, v_scale, v_zero, dtype))
        return (gather_kv(key_cache, block_table, block_size, length),
                gather_kv(value_cache, block_table, block_size, length))
    except ValueError as exc:
        raise ValueError(f"{op}: {exc}") from None


#: the decode step's layout (flat block indices, additive key mask, regular rows), once per step for all layers
_LAYOUT = StepMemo()


#: a block table's regular-rows verdict, for as long as the table lives (a decode loop keeps one table until a
#: sequence needs a new block)
_ROWS = StepMemo()


def _regular_rows(block_table: Tensor, num: int) -> tuple[int, int] | None:
    """``(first, stride)`` when row ``b`` of a host block table's first ``num`` columns is ``first + b * stride + (0,
    1, 2, ...)`` (every sequence's blocks consecutive, the rows evenly spaced: a pool reserved per sequence up
    front), else None; the cache then reads as a strided view. Device tables are not inspected (a device-to-host
    sync per step)."""
    if block_table.device.type != "cpu" or block_table.numel() == 0:
        return None
    found = _ROWS.get((block_table,), num)
    if found is None:
        found = (_find_regular_rows(block_table[:, :num]),)
        _ROWS.put((block_table,), num, found)
    return found[0]


def _find_regular_rows(table: Tensor) -> tuple[int, int] | None:
    batch, num = table.shape
    first = int(table[0, 0])
    stride = int(table[1, 0]) - first if batch > 1 else num
    if stride < 0:
        return None
    starts = torch.arange(batch, dtype=table.dtype).mul_(stride).add_(first)
    expected = starts.view(-1, 1) + torch.arange(num, dtype=table.dtype)
    return (first, stride) if torch.equal(table, expected) else None


def _decode_layout(block_table: Tensor, kv_seq_len: Tensor, block_size: int, length: int,
                   dtype: torch.dtype) -> tuple[Tensor, Tensor, tuple[int, int] | None]:
    """``(block indices of the blocks holding every sequence's first length positions, flat, additive key mask (B,
    1, 1, length) in dtype: 0 where a key is cached, -inf past the sequence's length, the table's regular rows or
    None)`` of a decode step; the layers of one step pass the same tensors, so the layout is
    computed once per step."""
    extra = (block_size, length, dtype)
    found = _LAYOUT.get((block_table, kv_seq_len), extra)
    if found is not None:
        return found
    num = -(-length // block_size)  # check_paged_decode checked the table's width
    table = block_table if block_table.shape[1] == num else block_table[:, :num]
    # the additive form (SDPA would build it from a boolean mask on every call), over the longest sequence's
    # positions (not whole blocks: the attention's cost grows with the keys), (B, 1, 1, length) by broadcasting
    cached = torch.arange(length, device=kv_seq_len.device) < kv_seq_len.view(-1, 1, 1, 1)
    mask = torch.where(cached, 0.0, float("-inf"))
    found = (table.reshape(-1), mask if mask.dtype == dtype else mask.to(dtype), _regular_rows(block_table, num))
    _LAYOUT.put((block_table, kv_seq_len), extra, found)
    return found


def _cached_keys(cache: Tensor, blocks: Tensor, regular: tuple[int, int] | None, batch: int,
                 width: int) -> Tensor:
    """``(batch, heads, width, head_dim)``: each sequence's first ``width`` cache positions, read in place when its
    blocks are consecutive and the rows evenly spaced (``regular``), else gathered block by block (``blocks``: each
    sequence's first ``ceil(width / block_size)`` blocks)."""
    num_blocks, block_size, heads, dim = cache.shape
    if regular is not None and cache.is_contiguous() and (
            regular[0] + (batch - 1) * regular[1] + -(-width // block_size) <= num_blocks):  # else the gather's error
        first, stride = regular
        row = heads * dim
        view = cache.as_strided((batch, width, heads, dim), (stride * block_size * row, row, dim, 1),
                                cache.storage_offset() + first * block_size * row)
        return view.transpose(1, 2)
    gathered = cache.index_select(0, blocks).view(batch, -1, heads, dim)
    return (gathered if gathered.shape[1] == width else gathered[:, :width]).transpose(1, 2)


@reference("paged_decode_attention")
def paged_decode_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_table: Tensor,
                           block_size: int, kv_seq_len: Tensor, max_kv_seq_len: int, num_q_heads: int,
                           num_kv_heads: int, softmax_scale: float | None, alibi_slopes: list[float] | None,
                           k_scale: Tensor | None, k_zero: Tensor | None, v_scale: Tensor | None,
                           v_zero: Tensor | None, quant_bits: int, sliding_window: int | None = None,
                           logit_softcapping: float | None = None) -> Tensor:
    """One query per sequence over its first ``kv_seq_len[b]`` cached positions."""
    check_paged_decode(query, key_cache, block_table, block_size, kv_seq_len, max_kv_seq_len, num_q_heads,
                       num_kv_heads)
    if quant_bits == 0 and alibi_slopes is None and not logit_softcapping and sliding_window is None:
        # the decode hot path: the step's block indices and key mask are the same for every layer (memoised),
        # each cache read in place (blocks reserved per sequence) or by one gather, one fused attention call
        blocks, mask, regular = _decode_layout(block_table, kv_seq_len, block_size, max_kv_seq_len, query.dtype)
        batch, width = query.shape[0], mask.shape[-1]
        k = _cached_keys(key_cache, blocks, regular, batch, width)
        v = _cached_keys(value_cache, blocks, regular, batch, width)
        return F.scaled_dot_product_attention(query.unsqueeze(2), k, v, attn_mask=mask, scale=softmax_scale,
                                              enable_gqa=num_q_heads != num_kv_heads).squeeze(2)
    op = "paged_decode_attention"
    quant = _quant_args(op, quant_bits, key_cache, k_scale, k_zero, v_scale, v_zero)
    k, v = _gather_pair(key_cache, value_cache, block_table, block_size, max_kv_seq_len, quant,
                        (k_scale, k_zero, v_scale, v_zero), query.dtype, op)
    k_pos = torch.arange(max_kv_seq_len, device=query.device)
    allowed = (k_pos.unsqueeze(0) < kv_seq_len.long().unsqueeze(1)).unsqueeze(1)        # (B, 1, S)
    q_pos = (kv_seq_len.long() - 1).unsqueeze(1)
    allowed = _window(allowed, q_pos, k_pos, sliding_window)
    if alibi_slopes is None and not logit_softcapping:  # the int8 cache or a window: still one fused call
        out = F.scaled_dot_product_attention(query.unsqueeze(2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=allowed.unsqueeze(1), scale=softmax_scale,
                                             enable_gqa=num_q_heads != num_kv_heads)
        return out.squeeze(2)
    alibi = _alibi(op, alibi_slopes, num_q_heads, query.device)
    return _attend(query.unsqueeze(1), k, v, allowed, softmax_scale, alibi, q_pos, k_pos,
                   logit_softcapping).squeeze(1)


@reference("paged_prefill_attention")
def paged_prefill_attention(query: Tensor, key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                            block_table: Tensor, block_size: int, q_start_loc: Tensor, q_seq_len: Tensor,
                            kv_seq_len: Tensor, max_q_seq_len: int, num_q_heads: int, num_kv_heads: int,
                            attn_mask: list[Tensor | None], softmax_scale: float | None,
                            alibi_slopes: list[float] | None, k_scale: Tensor | None, k_zero: Tensor | None,
                            v_scale: Tensor | None, v_zero: Tensor | None, quant_bits: int,
                            max_kv_seq_len: int | None = None, sliding_window: int | None = None,
                            logit_softcapping: float | None = None) -> Tensor:
    """Causal attention of packed new queries over the cache (which already holds their keys): query ``i`` of a
    sequence with ``q`` new and ``kv`` total tokens sits at position ``kv - q + i``. ``max_kv_seq_len`` (when
    given) spares the host sync that finds the longest sequence."""
    op = "paged_prefill_attention"
    check_paged_prefill(query, key_cache, block_table, block_size, q_start_loc, q_seq_len, kv_seq_len, num_q_heads,
                        num_kv_heads)
    quant = _quant_args(op, quant_bits, key_cache, k_scale, k_zero, v_scale, v_zero)
    if max_kv_seq_len is None or max_kv_seq_len < 0:
        max_kv_seq_len = int(kv_seq_len.max()) if kv_seq_len.numel() else 0  # a host sync: the padded key length
    max_kv = max_kv_seq_len
    _check_table(op, key_cache, block_table, block_size, max_kv)
    k, v = _gather_pair(key_cache, value_cache, block_table, block_size, max_kv, quant,
                        (k_scale, k_zero, v_scale, v_zero), query.dtype, op)
    num_tokens = query.shape[0]
    seq, index, gather, valid = _token_layout(q_start_loc, q_seq_len, num_tokens, max_q_seq_len)
    kv_len = kv_seq_len.long()
    q_pos = (kv_len - q_seq_len.long()).unsqueeze(1) + torch.arange(max_q_seq_len, device=query.device)
    k_pos = torch.arange(max_kv, device=query.device)
    allowed = (k_pos.view(1, 1, -1) <= q_pos.unsqueeze(-1)) & (k_pos.view(1, 1, -1) < kv_len.view(-1, 1, 1))
    allowed = _window(allowed & valid.unsqueeze(-1), q_pos, k_pos, sliding_window)
    if attn_mask:
        allowed = _user_masks(op, attn_mask, allowed)
    if alibi_slopes is None and not logit_softcapping:
        return _sdpa(query[gather], k, v, allowed, softmax_scale)[seq, index]
    alibi = _alibi(op, alibi_slopes, num_q_heads, query.device)
    out = _attend(query[gather], k, v, allowed, softmax_scale, alibi, q_pos, k_pos, logit_softcapping)
    return out[seq, index]
