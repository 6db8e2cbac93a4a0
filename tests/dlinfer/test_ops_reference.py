"""dlinfer's operators (reference kernels on CPU) against dense references built here independently: HF's
formulas for norms/rotary/MLP/MoE routing, per-sequence ``scaled_dot_product_attention`` for attention, the same
keys laid out in shuffled cache blocks for the paged kernels. float32 and bfloat16, judged by ``diopi.compare``
(bfloat16 with the float64 noise-floor rule)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import dlinfer
from diopi.compare import all_passed, compare_outputs
from dlinfer.ops import llm

DTYPES = [torch.float32, torch.bfloat16]


def judge(actual, dense, dtype: torch.dtype) -> None:
    """``dense(dtype)`` computes the expected value from float inputs cast to ``dtype``; bf16 is also given the
    float64 result, so the noise-floor rule applies."""
    expected = dense(dtype)
    fp64 = dense(torch.float64) if dtype != torch.float32 else None
    results = compare_outputs(actual, expected, expected_fp64=fp64)
    assert all_passed(results), "\n".join(r.message for r in results)


# -- norms, activation, rotary ----------------------------------------------------------------------------------
def hf_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return w * (x.to(torch.float32) * torch.rsqrt(var + eps)).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_and_add_rms_norm(dtype):
    g = torch.Generator().manual_seed(0)
    x, r, w = torch.randn(5, 3, 32, generator=g), torch.randn(5, 3, 32, generator=g), torch.randn(32, generator=g)
    out = llm.rms_norm(x.to(dtype), w.to(dtype), 1e-6)
    # float32: bit-equal to HF's LlamaRMSNorm formula (greedy tokens must match stock transformers)
    if dtype == torch.float32:
        assert torch.equal(out, hf_rms(x, w, 1e-6))
    judge(out, lambda dt: hf_rms(x.to(dt), w.to(dt), 1e-6), dtype)
    normed, added = llm.add_rms_norm(x.to(dtype), r.to(dtype), w.to(dtype), 1e-5)
    judge(added, lambda dt: x.to(dt) + r.to(dt), dtype)
    judge(normed, lambda dt: hf_rms((x.to(dtype) + r.to(dtype)).to(dt), w.to(dt), 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype):
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(1))
    judge(llm.silu_and_mul(x.to(dtype)), lambda dt: F.silu(x.to(dt)[..., :8]) * x.to(dt)[..., 8:], dtype)
    judge(llm.silu_and_mul(x.to(dtype), dim=1), lambda dt: F.silu(x.to(dt)[:, :3]) * x.to(dt)[:, 3:], dtype)


def dense_rotary(x: torch.Tensor, pos: torch.Tensor, rot: int, base: float = 10000.0) -> torch.Tensor:
    """Rotary by angles (pairs i and i + rot/2 rotated by pos * base^(-2i/rot)), computed from scratch."""
    half = rot // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2 / rot)
    ang = pos.to(torch.float64)[:, None] * inv[None]                         # (T, half)
    c, s = ang.cos()[:, None].to(x.dtype), ang.sin()[:, None].to(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s, rest), dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rot", [16, 8])
def test_rotary_both_forms_partial(dtype, rot):
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(7, 4, 16, generator=g), torch.randn(7, 2, 16, generator=g)
    pos = torch.tensor([0, 1, 2, 5, 9, 3, 4])
    half = rot // 2
    inv = 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / rot)
    table = torch.arange(16, dtype=torch.float32)[:, None] * inv[None]          # (max_pos, half)
    cache = torch.cat((table.cos(), table.sin()), dim=-1).to(dtype)
    emb = torch.cat((table[pos], table[pos]), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    a = llm.apply_rotary_pos_emb(q.to(dtype), k.to(dtype), cos, sin)
    b = llm.apply_rotary_pos_emb(q.to(dtype), k.to(dtype), None, None, pos, cache)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # both forms are the same computation
    judge(a[0], lambda dt: dense_rotary(q.to(dt), pos, rot), dtype)
    judge(a[1], lambda dt: dense_rotary(k.to(dt), pos, rot), dtype)
    if rot < 16:  # partial rotary leaves the tail untouched
        assert torch.equal(a[0][..., rot:], q.to(dtype)[..., rot:])


# -- attention ----------------------------------------------------------------------------------------------------
def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_offset: int | None, scale: float | None = None,
         mask: torch.Tensor | None = None) -> torch.Tensor:
    """Dense attention of one sequence: q ``(L, Hq, D)``, k/v ``(S, Hkv, D)``; query ``i`` sees keys
    ``<= causal_offset + i`` (None: all keys); ``mask`` True = not allowed."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    allowed = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool)
    if causal_offset is not None:
        allowed = torch.arange(k.shape[0])[None] <= causal_offset + torch.arange(q.shape[0])[:, None]
    if mask is not None:
        allowed = ~mask
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                         attn_mask=allowed, scale=scale)
    return out.transpose(0, 1)


def packed(lens: list[int], heads: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(lens), heads, dim, generator=g)
    return x, torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()[:-1]]), torch.tensor(lens)


def paged_layout(kv_lens: list[int], block_size: int, spare: int, seed: int) -> tuple[torch.Tensor, int]:
    """A block table whose blocks are a random permutation of the pool (plus ``spare`` unused blocks)."""
    need = [math.ceil(n / block_size) for n in kv_lens]
    width = max(need) + 1
    total = sum(need) + spare
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))
    table = torch.full((len(kv_lens), width), total - 1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[used:used + n].to(torch.int32)
        used += n
    return table, total


def write_cache(seqs: list[torch.Tensor], table: torch.Tensor, num_blocks: int, block_size: int) -> torch.Tensor:
    """Place each sequence's ``(len, H, D)`` rows at block ``table[b, p // bs]``, slot ``p % bs`` (no dlinfer)."""
    cache = torch.full((num_blocks, block_size, *seqs[0].shape[1:]), float("nan"), dtype=seqs[0].dtype)
    for b, s in enumerate(seqs):
        for p in range(s.shape[0]):
            cache[table[b, p // block_size], p % block_size] = s[p]
    return cache


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2)])
def test_prefill_attention(dtype, hq, hkv):
    lens = [5, 1, 8]
    q, start, qlen = packed(lens, hq, 16, 3)
    k, _, _ = packed(lens, hkv, 16, 4)
    v, _, _ = packed(lens, hkv, 16, 5)
    out = llm.prefill_attention(q.to(dtype), k.to(dtype), v.to(dtype), start, qlen, max(lens), hq, hkv)

    def dense(dt):
        return torch.cat([sdpa(q[s:s + n].to(dt), k[s:s + n].to(dt), v[s:s + n].to(dt), 0)
                          for s, n in zip(start.tolist(), lens, strict=True)])

    judge(out, dense, dtype)


def test_prefill_attention_scale_mask_and_alibi():
    lens = [3, 6]
    q, start, qlen = packed(lens, 2, 8, 6)
    k, _, _ = packed(lens, 2, 8, 7)
    v, _, _ = packed(lens, 2, 8, 8)
    masks = [torch.rand(3, 3, generator=torch.Generator().manual_seed(9)) > 0.6, None]
    for m in masks[:1]:
        m.fill_diagonal_(False)
    out = llm.prefill_attention(q, k, v, start, qlen, 6, 2, 2, masks, softmax_scale=0.3)
    ref = torch.cat([sdpa(q[:3], k[:3], v[:3], 0, 0.3, masks[0]), sdpa(q[3:], k[3:], v[3:], 0, 0.3)])
    judge(out, lambda dt: ref, torch.float32)
    slopes = [0.5, 0.25]
    out = llm.prefill_attention(q, k, v, start, qlen, 6, 2, 2, alibi_slopes=slopes)
    refs = []
    for s, n in zip(start.tolist(), lens, strict=True):
        pos = torch.arange(n)
        bias = torch.tensor(slopes)[:, None, None] * (pos[None, None] - pos[None, :, None])
        bias = bias.masked_fill(pos[None, None] > pos[None, :, None], float("-inf"))
        att = torch.softmax(torch.einsum("qhd,khd->hqk", q[s:s + n], k[s:s + n]) / math.sqrt(8) + bias, -1)
        refs.append(torch.einsum("hqk,khd->qhd", att, v[s:s + n]))
    judge(out, lambda dt: torch.cat(refs), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_decode_attention_shuffled_blocks_gqa(dtype):
    kv_lens, bs, hq, hkv = [7, 1, 12], 4, 4, 2
    keys = [torch.randn(n, hkv, 16, generator=torch.Generator().manual_seed(10 + i)) for i, n in enumerate(kv_lens)]
    vals = [torch.randn(n, hkv, 16, generator=torch.Generator().manual_seed(20 + i)) for i, n in enumerate(kv_lens)]
    q = torch.randn(3, hq, 16, generator=torch.Generator().manual_seed(30))
    table, nblocks = paged_layout(kv_lens, bs, 3, 11)
    kc = write_cache([x.to(dtype) for x in keys], table, nblocks, bs).nan_to_num(0.0)
    vc = write_cache([x.to(dtype) for x in vals], table, nblocks, bs).nan_to_num(0.0)
    out = llm.paged_decode_attention(q.to(dtype), kc, vc, table, bs, torch.tensor(kv_lens), max(kv_lens), hq, hkv)

    def dense(dt):
        return torch.cat([sdpa(q[b:b + 1].to(dt), keys[b].to(dt), vals[b].to(dt), None) for b in range(3)])

    judge(out, dense, dtype)


@pytest.mark.parametrize("rows", [[[2, 3, 4], [6, 7, 8], [10, 11, 12]],   # consecutive blocks, rows 4 apart
                                  [[0, 1, 2], [3, 4, 5], [6, 7, 8]],      # a pool reserved per sequence up front
                                  [[5, 6, 7]]])                            # one sequence
def test_paged_decode_attention_reads_consecutive_blocks_in_place(rows):
    """A host block table with consecutive blocks per row, rows evenly spaced: the cache is read as a strided view
    (no gather); the result is still each sequence's dense attention over its own keys."""
    from dlinfer.reference.attention import _regular_rows

    bs, hq, hkv = 4, 4, 2
    table = torch.tensor(rows, dtype=torch.int32)
    kv_lens = [7, 1, 12][:len(rows)]
    assert _regular_rows(table, 3) == (rows[0][0], rows[1][0] - rows[0][0] if len(rows) > 1 else 3)
    keys = [torch.randn(n, hkv, 16, generator=torch.Generator().manual_seed(10 + i)) for i, n in enumerate(kv_lens)]
    vals = [torch.randn(n, hkv, 16, generator=torch.Generator().manual_seed(20 + i)) for i, n in enumerate(kv_lens)]
    q = torch.randn(len(rows), hq, 16, generator=torch.Generator().manual_seed(30))
    nblocks = int(table.max()) + 2
    kc = write_cache(keys, table, nblocks, bs).nan_to_num(0.0)
    vc = write_cache(vals, table, nblocks, bs).nan_to_num(0.0)
    out = llm.paged_decode_attention(q, kc, vc, table, bs, torch.tensor(kv_lens), max(kv_lens), hq, hkv)
    dense = torch.cat([sdpa(q[b:b + 1], keys[b], vals[b], None) for b in range(len(rows))])
    judge(out, lambda dt: dense, torch.float32)
    flipped = table.flip(0)  # the same blocks, rows in reverse order (a negative stride): gathered
    assert _regular_rows(flipped, 3) is None or len(rows) == 1
    out_flipped = llm.paged_decode_attention(q.flip(0), kc, vc, flipped, bs, torch.tensor(kv_lens[::-1]),
                                             max(kv_lens), hq, hkv)
    judge(out_flipped.flip(0), lambda dt: dense, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_prefill_attention_continues_cached_tokens(dtype):
    kv_lens, new, bs, hq, hkv = [9, 4, 6], [3, 4, 1], 4, 4, 1
    keys = [torch.randn(n, hkv, 8, generator=torch.Generator().manual_seed(40 + i)) for i, n in enumerate(kv_lens)]
    vals = [torch.randn(n, hkv, 8, generator=torch.Generator().manual_seed(50 + i)) for i, n in enumerate(kv_lens)]
    q, start, qlen = packed(new, hq, 8, 60)
    table, nblocks = paged_layout(kv_lens, bs, 2, 12)
    kc = write_cache([x.to(dtype) for x in keys], table, nblocks, bs).nan_to_num(0.0)
    vc = write_cache([x.to(dtype) for x in vals], table, nblocks, bs).nan_to_num(0.0)
    k_new = torch.cat([keys[b][-n:] for b, n in enumerate(new)]).to(dtype)
    v_new = torch.cat([vals[b][-n:] for b, n in enumerate(new)]).to(dtype)
    out = llm.paged_prefill_attention(q.to(dtype), k_new, v_new, kc, vc, table, bs, start, qlen,
                                      torch.tensor(kv_lens), max(new), hq, hkv)

    def dense(dt):
        return torch.cat([sdpa(q[s:s + n].to(dt), keys[b].to(dt), vals[b].to(dt), kv_lens[b] - n)
                          for b, (s, n) in enumerate(zip(start.tolist(), new, strict=True))])

    judge(out, dense, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_kv_cache_then_decode_equals_dense(dtype):
    bs, hkv = 4, 2
    k, start, lens = packed([5, 3], hkv, 8, 70)
    v, _, _ = packed([5, 3], hkv, 8, 71)
    table, nblocks = paged_layout([5, 3], bs, 1, 13)
    slots = torch.cat([table[b, torch.arange(n) // bs].long() * bs + torch.arange(n) % bs
                       for b, n in enumerate([5, 3])])
    kc = torch.zeros(nblocks, bs, hkv, 8, dtype=dtype)
    vc = torch.zeros_like(kc)
    llm.fill_kv_cache(k.to(dtype), v.to(dtype), kc, vc, slots)
    assert torch.equal(kc, write_cache([k[:5].to(dtype), k[5:].to(dtype)], table, nblocks, bs).nan_to_num(0.0))
    assert torch.equal(vc, write_cache([v[:5].to(dtype), v[5:].to(dtype)], table, nblocks, bs).nan_to_num(0.0))


# -- MoE and linear ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_gating_and_fused_moe(dtype):
    g = torch.Generator().manual_seed(80)
    tokens, hidden, inter, experts, topk = 6, 16, 8, 4, 2
    x, logits = torch.randn(tokens, hidden, generator=g), torch.randn(tokens, experts, generator=g)
    gu, down = torch.randn(experts, 2 * inter, hidden, generator=g), torch.randn(experts, hidden, inter, generator=g)
    w, ids = llm.moe_gating_topk_softmax(logits.to(dtype), topk, renormalize=True)
    assert w.dtype == torch.float32 and ids.dtype == torch.int64
    probs = torch.softmax(logits.to(dtype).float(), -1)
    assert torch.equal(ids, probs.argsort(-1, descending=True)[:, :topk])
    judge(w, lambda dt: (probs.gather(1, ids) / probs.gather(1, ids).sum(-1, keepdim=True)).float(),
          torch.float32)
    w_plain, _ = llm.moe_gating_topk_softmax(logits, topk)
    judge(w_plain, lambda dt: torch.softmax(logits, -1).gather(1, ids), torch.float32)
    out = llm.fused_moe(x.to(dtype), gu.to(dtype), down.to(dtype), w, ids, topk)

    def dense(dt):
        total = torch.zeros(tokens, hidden, dtype=dt)
        for t in range(tokens):
            for j in range(topk):
                e = int(ids[t, j])
                h = gu[e].to(dt) @ x[t].to(dt)
                total[t] += w[t, j].to(dt) * (down[e].to(dt) @ (F.silu(h[:inter]) * h[inter:]))
        return total

    judge(out, dense, dtype)


def test_fused_moe_grouped_multiply_equals_the_per_expert_loop():
    """The grouped path (one multiply per projection for all experts, rows 16-byte aligned) and the per-expert loop
    (any other layout or dtype) compute the same; an expert id past the experts is one line."""
    from dlinfer.reference import moe

    g = torch.Generator().manual_seed(81)
    for hidden, inter in ((16, 8), (6, 5)):  # aligned: grouped; 6 / 5 floats per row: the loop
        x = torch.randn(7, hidden, generator=g)
        gu, down = torch.randn(5, 2 * inter, hidden, generator=g), torch.randn(5, hidden, inter, generator=g)
        w, ids = llm.moe_gating_topk_softmax(torch.randn(7, 5, generator=g), 3)
        assert moe._aligned(x, gu, down) is (hidden == 16)
        grouped = llm.fused_moe(x, gu, down, w, ids, 3)
        loop = llm.fused_moe(x.double(), gu.double(), down.double(), w, ids, 3)  # float64: always the loop
        torch.testing.assert_close(grouped, loop.float(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="topk_ids hold an expert id >= num_experts"):
        llm.fused_moe(torch.randn(2, 16), torch.randn(2, 16, 16), torch.randn(2, 16, 8), torch.ones(2, 1),
                      torch.tensor([[0], [2]]), 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear(dtype):
    g = torch.Generator().manual_seed(90)
    x, w, b = torch.randn(3, 5, 16, generator=g), torch.randn(12, 16, generator=g), torch.randn(12, generator=g)
    judge(llm.linear(x.to(dtype), w.to(dtype), b.to(dtype)), lambda dt: x.to(dt) @ w.to(dt).T + b.to(dt), dtype)
    with pytest.raises(RuntimeError, match="all_reduce"):
        llm.linear(x, w, None, all_reduce=True)


def test_all_reduce_sums_over_the_default_group():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x, w = torch.randn(3, 16), torch.randn(8, 16)
        assert torch.equal(llm.linear(x, w, None, all_reduce=True), llm.linear(x, w))
        qw = torch.randint(-8, 8, (16, 8), dtype=torch.int8)
        assert torch.equal(llm.weight_quant_matmul(x, qw, torch.ones(8), all_reduce=True),
                           llm.weight_quant_matmul(x, qw, torch.ones(8)))
    finally:
        dist.destroy_process_group()


def test_reference_kernels_ran_and_were_counted():
    dlinfer.reset_counts()
    x = torch.randn(2, 8)
    llm.rms_norm(x, torch.ones(8), 1e-6)
    llm.silu_and_mul(x)
    assert dlinfer.kernel_counts() == {("rms_norm", "reference"): 1, ("silu_and_mul", "reference"): 1}


# -- bad input ---------------------------------------------------------------------------------------------------
def test_bad_input_names_the_argument():
    q = torch.randn(4, 4, 8)
    kc = torch.zeros(4, 4, 2, 8)
    table = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="head_dim"):
        llm.paged_decode_attention(q[:1], torch.zeros(4, 4, 2, 16), torch.zeros(4, 4, 2, 16), table, 4,
                                   torch.tensor([3]), 3, 4, 2)
    with pytest.raises(ValueError, match="num_q_heads"):
        llm.paged_decode_attention(q[:1, :3], kc, kc, table, 4, torch.tensor([3]), 3, 3, 2)
    with pytest.raises(ValueError, match="block_table"):
        llm.paged_decode_attention(q[:1], kc, kc, table, 4, torch.tensor([6]), 6, 4, 2)
    with pytest.raises(ValueError, match="kv_indices"):
        llm.fill_kv_cache(torch.randn(1, 2, 8), torch.randn(1, 2, 8), kc, kc.clone(), torch.tensor([16]))
    with pytest.raises(ValueError, match="quant_bits"):
        llm.fill_kv_cache(torch.randn(1, 2, 8), torch.randn(1, 2, 8), kc, kc.clone(), torch.tensor([1]),
                          quant_bits=4)
    with pytest.raises(ValueError, match="query"):
        llm.prefill_attention(q[0], q[0], q[0], torch.tensor([0]), torch.tensor([4]), 4, 4, 4)
    with pytest.raises(ValueError, match="weight"):
        llm.rms_norm(q, torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match="alibi_slopes"):
        llm.prefill_attention(q, q, q, torch.tensor([0]), torch.tensor([4]), 4, 4, 4, alibi_slopes=[1.0])


def test_paged_kernels_agree_with_prefill_on_alibi_and_masks():
    """A whole sequence in the cache: paged prefill (with a mask) equals prefill with the same mask, and the
    decode of its last token (with alibi) equals prefill's last row."""
    n, bs, hq, hkv = 7, 4, 4, 2
    q, k, v = _randn_seq(n, hq, 100), _randn_seq(n, hkv, 101), _randn_seq(n, hkv, 102)
    table, nblocks = paged_layout([n], bs, 2, 14)
    kc, vc = write_cache([k], table, nblocks, bs).nan_to_num(0.0), write_cache([v], table, nblocks, bs).nan_to_num(0.0)
    start, lens = torch.tensor([0]), torch.tensor([n])
    mask = torch.rand(n, n, generator=torch.Generator().manual_seed(15)) > 0.5
    mask.fill_diagonal_(False)
    paged = llm.paged_prefill_attention(q, k, v, kc, vc, table, bs, start, lens, lens, n, hq, hkv, [mask])
    dense = llm.prefill_attention(q, k, v, start, lens, n, hq, hkv, [mask])
    assert all_passed(compare_outputs(paged, dense))
    judge(dense[:1], lambda dt: sdpa(q[:1], k, v, None, mask=mask[:1]), torch.float32)
    slopes = [0.5, 0.25, 0.125, 0.0625]
    last = llm.paged_decode_attention(q[-1:], kc, vc, table, bs, lens, n, hq, hkv, alibi_slopes=slopes)
    full = llm.prefill_attention(q, k, v, start, lens, n, hq, hkv, alibi_slopes=slopes)
    assert all_passed(compare_outputs(last, full[-1:]))
    assert not all_passed(compare_outputs(last, llm.paged_decode_attention(q[-1:], kc, vc, table, bs, lens, n, hq,
                                                                            hkv)))


def _randn_seq(n: int, heads: int, seed: int) -> torch.Tensor:
    return torch.randn(n, heads, 8, generator=torch.Generator().manual_seed(seed))
