"""Every dlinfer operator as current LMDeploy calls it equals a float64 reference written here from the
definitions (not dlinfer's reference kernels): through LMDeploy's own kernel wrappers
(``lmdeploy.pytorch.kernels.dlinfer``) when lmdeploy is installed, and through the same call forms written out
(LMDeploy 0.18's argument order) always. Older call forms (LMDeploy 0.6 attention, 0.7 gating) are accepted and
give the same result; a form that fits nothing fails with a TypeError naming the operator."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

import dlinfer.ops as ops
from dlinfer.utils.type_annotation import MoeMetadata

HAS_LMDEPLOY = importlib.util.find_spec("lmdeploy") is not None
CALLERS = ["written"] + (["lmdeploy"] if HAS_LMDEPLOY else [])
F64 = torch.float64
BLOCK = 4
Q_LENS, KV_LENS = [5, 3], [9, 3]          # sequence 0 continues 4 cached tokens, sequence 1 is new
HQ, HKV, DIM = 4, 2, 8


def _lmd():
    return importlib.import_module("lmdeploy.pytorch.kernels.dlinfer")


def _close(got: torch.Tensor, want: torch.Tensor, tol: float = 2e-5) -> None:
    err = (got.to(F64) - want).abs().max().item()
    assert err <= tol, f"max abs error {err} > {tol}"


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: list[int], scale: float,
                 window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """q ``(L, Hq, D)`` at positions ``q_pos``, k/v ``(S, Hkv, D)`` at 0..S-1, causal, float64."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    out = torch.empty_like(q)
    for i, p in enumerate(q_pos):
        s = torch.einsum("hd,shd->hs", q[i], k) * scale
        if softcap:
            s = torch.tanh(s / softcap) * softcap
        keys = torch.arange(k.shape[0])
        ok = keys <= p
        if window is not None:
            ok &= keys > p - window
        s = s.masked_fill(~ok, -math.inf)
        out[i] = torch.einsum("hs,shd->hd", torch.softmax(s, -1), v)
    return out


@pytest.fixture
def paged():
    """Packed new tokens, their full key/value histories, and a shuffled paged cache holding all of them."""
    g = torch.Generator().manual_seed(0)
    hist_k = [torch.randn(n, HKV, DIM, generator=g) for n in KV_LENS]
    hist_v = [torch.randn(n, HKV, DIM, generator=g) for n in KV_LENS]
    q = torch.cat([torch.randn(n, HQ, DIM, generator=g) for n in Q_LENS])
    blocks_per = [-(-n // BLOCK) for n in KV_LENS]
    order = torch.randperm(sum(blocks_per) + 2, generator=g).tolist()
    table = torch.zeros(len(KV_LENS), max(blocks_per), dtype=torch.int32)
    kc = torch.zeros(len(order), BLOCK, HKV, DIM)
    vc = torch.zeros_like(kc)
    for b, n in enumerate(KV_LENS):
        for j in range(blocks_per[b]):
            table[b, j] = order.pop()
        for p in range(n):
            kc[table[b, p // BLOCK], p % BLOCK] = hist_k[b][p]
            vc[table[b, p // BLOCK], p % BLOCK] = hist_v[b][p]
    new_k = torch.cat([hk[-n:] for hk, n in zip(hist_k, Q_LENS, strict=True)])
    new_v = torch.cat([hv[-n:] for hv, n in zip(hist_v, Q_LENS, strict=True)])
    return dict(q=q, k=new_k, v=new_v, kc=kc, vc=vc, table=table, hist_k=hist_k, hist_v=hist_v)


def _expected_prefill(paged, scale: float, window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    outs, start = [], 0
    for b, (ql, kl) in enumerate(zip(Q_LENS, KV_LENS, strict=True)):
        outs.append(_attention64(paged["q"][start:start + ql], paged["hist_k"][b], paged["hist_v"][b],
                                 list(range(kl - ql, kl)), scale, window, softcap))
        start += ql
    return torch.cat(outs)


def _cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


@pytest.mark.parametrize("caller", CALLERS)
def test_paged_prefill_current_call(caller, paged):
    scale = 1 / math.sqrt(DIM)
    out = paged["q"].new_empty(paged["q"].shape)
    cu = _cu(Q_LENS)
    kv = torch.tensor(KV_LENS, dtype=torch.int32)
    if caller == "lmdeploy":
        _lmd().paged_attention_fwd(paged["q"], paged["k"], paged["v"], out, paged["kc"], paged["vc"], paged["table"],
                                   q_seqlens=torch.tensor(Q_LENS), kv_seqlens=kv, max_q_seq_len=max(Q_LENS),
                                   max_kv_seq_len=max(KV_LENS), is_decoding=False, block_size=BLOCK, num_heads=HQ,
                                   num_kv_heads=HKV, v_head_size=DIM, cu_seqlens_q=cu, cu_seqlens_q_cpu=cu,
                                   kv_seqlens_cpu=kv, softmax_scale=scale, is_prefill_no_cache=False)
    else:
        ops.paged_prefill_attention(paged["q"], paged["k"], paged["v"], paged["kc"], paged["vc"], paged["table"],
                                    BLOCK, cu[1:], kv, max(Q_LENS), max(KV_LENS), HQ, HKV, [], head_size_v=DIM,
                                    softmax_scale=scale, attn_output=out, kv_scales=None, kv_zeros=None,
                                    quant_bits=0)
    _close(out, _expected_prefill(paged, scale))


def test_paged_prefill_older_form_and_window(paged):
    scale = 0.3
    start = torch.tensor([0, Q_LENS[0]])
    old = ops.paged_prefill_attention(paged["q"], paged["k"], paged["v"], paged["kc"], paged["vc"], paged["table"],
                                      BLOCK, start, torch.tensor(Q_LENS), torch.tensor(KV_LENS), max(Q_LENS), HQ,
                                      HKV, [], softmax_scale=scale)
    _close(old, _expected_prefill(paged, scale))
    windowed = ops.paged_prefill_attention(paged["q"], paged["k"], paged["v"], paged["kc"], paged["vc"],
                                           paged["table"], BLOCK, _cu(Q_LENS)[1:], torch.tensor(KV_LENS),
                                           max(Q_LENS), max(KV_LENS), HQ, HKV, softmax_scale=scale,
                                           sliding_window=3, logit_softcapping=2.0)
    _close(windowed, _expected_prefill(paged, scale, window=3, softcap=2.0))


@pytest.mark.parametrize("caller", CALLERS)
def test_decode_current_call(caller, paged):
    scale = 1 / math.sqrt(DIM)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(len(KV_LENS), HQ, DIM, generator=g)
    out = q.new_empty(q.shape)
    cu = _cu([1] * len(KV_LENS))
    kv = torch.tensor(KV_LENS, dtype=torch.int32)
    if caller == "lmdeploy":
        _lmd().paged_attention_fwd(q, None, None, out, paged["kc"], paged["vc"], paged["table"],
                                   q_seqlens=torch.ones(2), kv_seqlens=kv, max_q_seq_len=1,
                                   max_kv_seq_len=max(KV_LENS), is_decoding=True, block_size=BLOCK, num_heads=HQ,
                                   num_kv_heads=HKV, v_head_size=DIM, cu_seqlens_q=cu, cu_seqlens_q_cpu=cu,
                                   kv_seqlens_cpu=kv, softmax_scale=scale)
    else:
        ops.paged_decode_attention(q, paged["kc"], paged["vc"], paged["table"], BLOCK, cu[1:], kv, max(KV_LENS), HQ,
                                   HKV, head_size_v=DIM, softmax_scale=scale, attn_output=out)
    want = torch.cat([_attention64(q[b:b + 1], paged["hist_k"][b], paged["hist_v"][b], [n - 1], scale)
                      for b, n in enumerate(KV_LENS)])
    _close(out, want)
    older = ops.paged_decode_attention(q, paged["kc"], paged["vc"], paged["table"], BLOCK, kv, max(KV_LENS), HQ,
                                       HKV, scale)
    _close(older, want)


@pytest.mark.parametrize("caller", CALLERS)
def test_prefill_no_cache_current_call(caller):
    g = torch.Generator().manual_seed(2)
    lens = [6, 3]
    q = torch.randn(sum(lens), HQ, DIM, generator=g)
    k, v = torch.randn(sum(lens), HKV, DIM, generator=g), torch.randn(sum(lens), HKV, DIM, generator=g)
    out = q.new_empty(q.shape)
    cu = _cu(lens)
    ql = torch.tensor(lens, dtype=torch.int32)
    if caller == "lmdeploy":
        _lmd().paged_attention_fwd(q, k, v, out, None, None, None, q_seqlens=ql, kv_seqlens=ql, max_q_seq_len=6,
                                   max_kv_seq_len=6, is_decoding=False, block_size=BLOCK, num_heads=HQ,
                                   num_kv_heads=HKV, v_head_size=DIM, cu_seqlens_q=cu, cu_seqlens_q_cpu=cu,
                                   kv_seqlens_cpu=ql, is_prefill_no_cache=True)
    else:
        ops.prefill_attention(q, k, v, None, None, ql, ql, 6, HQ, HKV, [], softmax_scale=None, attn_output=out,
                              actual_seq_lengths_cpu=cu[1:])
    want = torch.cat([_attention64(q[s:e], k[s:e], v[s:e], list(range(e - s)), 1 / math.sqrt(DIM))
                      for s, e in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)])
    _close(out, want)
    older = ops.prefill_attention(q, k, v, cu[:-1], ql, 6, HQ, HKV, [])
    _close(older, want)


@pytest.mark.parametrize("caller", CALLERS)
def test_fill_kv_cache_current_call(caller):
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(3, HKV, DIM, generator=g), torch.randn(3, HKV, DIM, generator=g)
    kc, vc = torch.zeros(4, BLOCK, HKV, DIM), torch.zeros(4, BLOCK, HKV, DIM)
    slots = torch.tensor([[13], [2], [7]])            # LMDeploy's decode shape (tokens, 1)
    fill = _lmd().fill_kv_cache if caller == "lmdeploy" else ops.fill_kv_cache
    fill(k, v, kc, vc, slots, k_scales_zeros=[], v_scales_zeros=[], quant_bits=0)
    for t, s in enumerate(slots.flatten().tolist()):
        assert torch.equal(kc.view(-1, HKV, DIM)[s], k[t]) and torch.equal(vc.view(-1, HKV, DIM)[s], v[t])


@pytest.mark.parametrize("caller", CALLERS)
def test_moe_gating_with_metadata_does_not_renormalise(caller):
    logits = torch.randn(5, 8, generator=torch.Generator().manual_seed(4))
    meta = MoeMetadata()
    gate = _lmd().moe_gating_topk_softmax if caller == "lmdeploy" else ops.moe_gating_topk_softmax
    weights, ids = gate(logits, 2, meta)
    probs = torch.softmax(logits.to(F64), -1)
    want_w, want_i = probs.topk(2, -1)
    assert torch.equal(ids, want_i)
    _close(weights, want_w, 1e-6)
    assert weights.sum(-1).max() < 0.999, "renormalised although LMDeploy passed moe_metadata, not renormalize"
    none_w, _ = gate(logits, 2, None)
    _close(none_w, want_w, 1e-6)


def test_moe_gating_older_forms_and_refusals():
    logits = torch.randn(5, 8, generator=torch.Generator().manual_seed(5))
    w, _ = ops.moe_gating_topk_softmax(logits, 2, True)   # LMDeploy 0.7: renormalize in this place
    _close(w.sum(-1), torch.ones(5, dtype=F64), 1e-6)
    with pytest.raises(NotImplementedError, match="ep_size=2"):
        ops.moe_gating_topk_softmax(logits, 2, MoeMetadata(ep_size=2))
    with pytest.raises(TypeError, match="moe_metadata must be"):
        ops.moe_gating_topk_softmax(logits, 2, "renorm")


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("renormalize", [False, True])
def test_fused_moe_current_call(caller, renormalize):
    g = torch.Generator().manual_seed(6)
    tokens, hidden, inter, experts, topk = 6, 8, 4, 3, 2
    x = torch.randn(tokens, hidden, generator=g)
    gate_up = torch.randn(experts, 2 * inter, hidden, generator=g)
    down = torch.randn(experts, hidden, inter, generator=g)
    w, ids = torch.rand(tokens, topk, generator=g), torch.stack([torch.randperm(experts, generator=g)[:topk]
                                                                  for _ in range(tokens)])
    fn = _lmd().fused_moe if caller == "lmdeploy" else ops.fused_moe
    out = fn(x, gate_up, down, w, ids, topk, renormalize, MoeMetadata(), None)
    ww = w.to(F64) / w.to(F64).sum(-1, keepdim=True) if renormalize else w.to(F64)
    want = torch.zeros(tokens, hidden, dtype=F64)
    for t in range(tokens):
        for j in range(topk):
            e = int(ids[t, j])
            gu = gate_up[e].to(F64) @ x[t].to(F64)
            h = torch.nn.functional.silu(gu[:inter]) * gu[inter:]
            want[t] += ww[t, j] * (down[e].to(F64) @ h)
    _close(out, want, 1e-4)
    with pytest.raises(NotImplementedError, match="chunked_moe_layout"):
        fn(x, gate_up, down, w, ids, topk, renormalize, MoeMetadata(), object())


@pytest.mark.parametrize("caller", CALLERS)
def test_norms_rotary_linear_activation_current_calls(caller):
    g = torch.Generator().manual_seed(7)
    x, res, wt = torch.randn(3, 16, generator=g), torch.randn(3, 16, generator=g), torch.randn(16, generator=g)
    lmd = _lmd() if caller == "lmdeploy" else None
    rms = lmd.rms_norm(x, wt, 1e-6) if lmd else ops.rms_norm(x, wt, 1e-6)
    x64 = x.to(F64)
    want = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * wt.to(F64)
    _close(rms, want)
    normed, added = lmd.rms_norm(x, wt, 1e-6, residual=res) if lmd else ops.add_rms_norm(x, res, wt, 1e-6)
    a64 = x64 + res.to(F64)
    _close(added, a64)
    _close(normed, a64 / torch.sqrt(a64.pow(2).mean(-1, keepdim=True) + 1e-6) * wt.to(F64))
    weight, bias = torch.randn(5, 16, generator=g), torch.randn(5, generator=g)
    lin = lmd.linear(x, weight, bias, False, "") if lmd else ops.linear(x, weight, bias, False, group="")
    _close(lin, x64 @ weight.to(F64).T + bias.to(F64))
    silu = importlib.import_module("lmdeploy.pytorch.kernels.dlinfer.activation").silu_and_mul if lmd else \
        ops.silu_and_mul
    _close(silu(x), torch.nn.functional.silu(x64[:, :8]) * x64[:, 8:])
    # rotary: half-split pairs, HF's duplicated-halves cos/sin, (tokens, heads, dim)
    q, k = torch.randn(3, HQ, DIM, generator=g), torch.randn(3, HKV, DIM, generator=g)
    ang = torch.rand(3, DIM // 2, generator=g, dtype=F64) * 3
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
    if lmd:
        qe, ke = lmd.apply_rotary_pos_emb(q, k, cos.float()[:, None], sin.float()[:, None], None, None)
    else:
        qe, ke = ops.apply_rotary_pos_emb(q, k, cos.float()[:, None], sin.float()[:, None])

    def rot(t):
        t = t.to(F64)
        half = torch.cat((-t[..., DIM // 2:], t[..., :DIM // 2]), -1)
        return t * cos[:, None] + half * sin[:, None]

    _close(qe, rot(q))
    _close(ke, rot(k))


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("native", [True, False])
def test_rotary_interleaved_current_call(caller, native):
    g = torch.Generator().manual_seed(8)
    q, k = torch.randn(1, 3, HQ, DIM, generator=g), torch.randn(1, 3, HKV, DIM, generator=g)
    ang = torch.rand(3, DIM // 2, generator=g, dtype=F64) * 3
    cos = ang.cos().repeat_interleave(2, -1)
    sin = ang.sin().repeat_interleave(2, -1)
    if caller == "lmdeploy":
        qe, ke = _lmd().apply_rotary_pos_emb_interleaved(q, k, cos.float(), sin.float(), None, None, native)
    else:
        x = torch.cat((q.reshape(-1, HQ, 1, DIM), k.reshape(-1, HKV, 1, DIM)), 1)
        out = ops.apply_rotary_pos_emb_interleaved(x, cos.float().reshape(3, 1, 1, DIM),
                                                   sin.float().reshape(3, 1, 1, DIM), native)
        qe, ke = out[:, :HQ].reshape(q.shape), out[:, HQ:].reshape(k.shape)

    def rot(t):
        t = t.to(F64)[0]
        c, s = ang.cos()[:, None], ang.sin()[:, None]
        first = t[..., 0::2] * c - t[..., 1::2] * s
        second = t[..., 1::2] * c + t[..., 0::2] * s
        return torch.cat((first, second), -1) if native else torch.stack((first, second), -1).flatten(-2)

    _close(qe[0], rot(q))
    _close(ke[0], rot(k))


def test_a_call_fitting_no_form_names_the_operator():
    q = torch.randn(2, HQ, DIM)
    with pytest.raises(TypeError, match="paged_decode_attention"):
        ops.paged_decode_attention(q, torch.zeros(2, BLOCK, HKV, DIM))
    with pytest.raises(AttributeError, match="sparse_flash_attention"):
        _ = ops.sparse_flash_attention
    with pytest.raises(ValueError, match="head_size_v=4"):
        ops.paged_decode_attention(q, torch.zeros(2, BLOCK, HKV, DIM), torch.zeros(2, BLOCK, HKV, DIM),
                                   torch.zeros(2, 1, dtype=torch.int32), BLOCK, _cu([1, 1])[1:],
                                   torch.tensor([1, 1]), 1, HQ, HKV, head_size_v=4)


def test_calls_on_inference_tensors(paged):
    """LMDeploy's forward runs under ``torch.inference_mode()``: its tensors track no version counter, which the
    per-step memos (decode layout, rotary cos/sin, host length copies) must not read; twice, as two layers do."""
    scale = 1 / math.sqrt(DIM)
    want = None
    with torch.inference_mode():
        q = torch.randn(len(KV_LENS), HQ, DIM, generator=torch.Generator().manual_seed(9))
        kc, vc, table = paged["kc"].clone(), paged["vc"].clone(), paged["table"].clone()
        kv = torch.tensor(KV_LENS, dtype=torch.int32)
        ends = _cu([1] * len(KV_LENS))[1:]
        for _ in range(2):
            out = ops.paged_decode_attention(q, kc, vc, table, BLOCK, ends, kv, max(KV_LENS), HQ, HKV,
                                             softmax_scale=scale)
            want = want if want is not None else out.clone()
            assert torch.equal(out, want)
        cos, sin = torch.ones(len(KV_LENS), DIM), torch.zeros(len(KV_LENS), DIM)
        for _ in range(2):
            qe, _ = ops.apply_rotary_pos_emb(q, q[:, :HKV], cos[:, None], sin[:, None])
            assert torch.equal(qe, q)   # angle 0: the identity
    expected = torch.cat([_attention64(q[b:b + 1], paged["hist_k"][b], paged["hist_v"][b], [n - 1], scale)
                          for b, n in enumerate(KV_LENS)])
    _close(want, expected)
