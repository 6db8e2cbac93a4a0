"""dlinfer's quantized paths against the documented error bounds (docs/dlinfer.md, "Quantization bounds"):
the int8 KV cache (round trip, paged attention against the float cache), per-token int8 activations, W8A8 and
W4A16/W8A16 weight-only matmul. Every bound is checked with ``diopi.compare`` on errors divided by their bound
(``atol=1``, ``rtol=0``), so an element over its own bound fails."""

from __future__ import annotations

import math

import pytest
import torch

from diopi.compare import all_passed, compare_outputs, compare_tensors
from dlinfer.ops import llm

#: float32 rounding slack on top of the bounds (relative)
SLACK = 1e-3


def within(error: torch.Tensor, bound: torch.Tensor | float) -> None:
    """Every ``|error| <= bound`` (elementwise, broadcast), judged by diopi.compare."""
    ratio = (error.double() / (torch.as_tensor(bound, dtype=torch.float64) * (1 + SLACK) + 1e-12))
    result = compare_tensors(ratio, torch.zeros_like(ratio), atol=1.0, rtol=0.0)
    assert result.verdict.value != "FAIL", result.message


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _int8_cache(num_blocks: int, bs: int, heads: int, dim: int) -> tuple[torch.Tensor, ...]:
    return (torch.zeros(num_blocks, bs, heads, dim, dtype=torch.int8), torch.zeros(num_blocks, bs, heads, dim,
            dtype=torch.int8), *(torch.zeros(num_blocks, bs, heads) for _ in range(4)))


# -- int8 KV cache ------------------------------------------------------------------------------------------------
def test_int8_cache_round_trip_within_half_a_step():
    k, v = _randn(10, 2, 16, seed=0) * 3 + 1, _randn(10, 2, 16, seed=1)
    k[3, 1] = 0.25  # a constant row: range 0
    kc, vc, ks, kz, vs, vz = _int8_cache(4, 4, 2, 16)
    slots = torch.randperm(16, generator=torch.Generator().manual_seed(2))[:10]
    llm.fill_kv_cache(k, v, kc, vc, slots, (ks, kz), (vs, vz), quant_bits=8)
    for x, qc, s, z in ((k, kc, ks, kz), (v, vc, vs, vz)):
        q = qc.view(16, 2, 16)[slots].float()
        scale, zero = s.view(16, 2)[slots], z.view(16, 2)[slots]
        assert torch.equal(zero, zero.round())  # an integer-valued zero
        varied = x.amax(-1) > x.amin(-1)  # rows with a range use the whole int8 range; a constant row is -128
        assert int(q.amin(-1).max()) == -128 and int(q.amax(-1)[varied].min()) >= 126
        back = (q - zero[..., None]) * scale[..., None]
        within(back - x, scale[..., None] / 2)
        lo, hi = x.amin(-1), x.amax(-1)
        results = compare_outputs(scale, ((hi - lo) / 255).clamp_min(1e-8))
        assert all_passed(results), results[0].message


def _attention_bound(q: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor, v: torch.Tensor,
                     softmax_scale: float) -> float:
    """``max s_v / 2 + (exp(2 delta) - 1) max |v|`` with ``delta = softmax_scale * max ||q||_1 * max s_k / 2``."""
    delta = softmax_scale * float(q.abs().sum(-1).max()) * float(k_scale.max()) / 2
    return float(v_scale.max()) / 2 + math.expm1(2 * delta) * float(v.abs().max())


def test_paged_attention_int8_cache_within_bound_of_float_cache():
    bs, hq, hkv, dim, kv_lens = 4, 4, 2, 16, [7, 3, 12]
    k, v = _randn(22, hkv, dim, seed=3), _randn(22, hkv, dim, seed=4)
    table = torch.tensor([[9, 2, 7], [0, 10, 10], [4, 1, 6]], dtype=torch.int32)  # shuffled blocks
    slots = torch.cat([table[b, torch.arange(n) // bs].long() * bs + torch.arange(n) % bs
                       for b, n in enumerate(kv_lens)])
    fc, fv = torch.zeros(11, bs, hkv, dim), torch.zeros(11, bs, hkv, dim)
    llm.fill_kv_cache(k, v, fc, fv, slots)
    kc, vc, ks, kz, vs, vz = _int8_cache(11, bs, hkv, dim)
    llm.fill_kv_cache(k, v, kc, vc, slots, (ks, kz), (vs, vz), quant_bits=8)
    q = _randn(3, hq, dim, seed=5)
    lens = torch.tensor(kv_lens)
    ref = llm.paged_decode_attention(q, fc, fv, table, bs, lens, 12, hq, hkv)
    out = llm.paged_decode_attention(q, kc, vc, table, bs, lens, 12, hq, hkv, kv_scales=(ks, vs),
                                     kv_zeros=torch.stack((kz, vz)), quant_bits=8)
    bound = _attention_bound(q, ks, vs, v, 1 / math.sqrt(dim))
    assert 0 < bound < 0.5  # a bound that says something for unit-variance data
    within(out - ref, bound)
    assert not torch.equal(out, ref)  # the quantized path really ran
    # paged prefill: the last 2, 3 and 4 tokens of each sequence as new queries
    new = [2, 3, 4]
    qp = _randn(9, hq, dim, seed=6)
    start, qlen = torch.tensor([0, 2, 5]), torch.tensor(new)
    knew = torch.zeros(9, hkv, dim)
    ref = llm.paged_prefill_attention(qp, knew, knew, fc, fv, table, bs, start, qlen, lens, 4, hq, hkv)
    out = llm.paged_prefill_attention(qp, knew, knew, kc, vc, table, bs, start, qlen, lens, 4, hq, hkv,
                                      kv_scales=(ks, vs), kv_zeros=(kz, vz), quant_bits=8)
    within(out - ref, _attention_bound(qp, ks, vs, v, 1 / math.sqrt(dim)))
    with pytest.raises(ValueError, match="k_scale"):
        llm.paged_decode_attention(q, kc, vc, table, bs, lens, 12, hq, hkv, quant_bits=8)


# -- W8A8 ---------------------------------------------------------------------------------------------------------
def _per_channel_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = w.abs().amax(-1) / 127
    return torch.round(w / scale[:, None]).to(torch.int8), scale


def test_dynamic_quant_and_norm_w8a8():
    x = _randn(3, 5, 64, seed=7) * 4
    q, s = llm.dynamic_quant(x)
    assert q.dtype == torch.int8 and s.shape == (3, 5, 1) and s.dtype == torch.float32
    assert int(q.abs().amax(-1).min()) == 127
    within(q.float() * s - x, s / 2)
    with pytest.raises(ValueError, match="quant_granularity"):
        llm.dynamic_quant(x, torch.int8, "PER_TENSOR")
    w, r = _randn(64, seed=8), _randn(3, 5, 64, seed=9)
    qn, sn = llm.rms_norm_w8a8(x, w, 1e-6)
    assert all_passed(compare_outputs((qn, sn), llm.dynamic_quant(llm.rms_norm(x, w, 1e-6))))
    qa, sa, added = llm.add_rms_norm_w8a8(x, r, w, 1e-6)
    normed, added_ref = llm.add_rms_norm(x, r, w, 1e-6)
    assert all_passed(compare_outputs((qa, sa, added), (*llm.dynamic_quant(normed), added_ref)))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_linear_w8a8_within_bound(out_dtype):
    x, w, bias = _randn(6, 96, seed=10), _randn(48, 96, seed=11) * 0.1, _randn(48, seed=12)
    qa, sa = llm.dynamic_quant(x)
    qw, sw = _per_channel_int8(w)
    y = llm.linear_w8a8(qa, qw, sa, sw, out_dtype, bias=bias)
    assert y.dtype == out_dtype
    # exactly the int32 product, scaled (float64 reference of the same integers)
    exact = (qa.double() @ qw.double().T) * sa.double() * sw.double() + bias.double()
    results = compare_outputs(y, exact.to(out_dtype), expected_fp64=exact)
    assert all_passed(results), results[0].message
    if out_dtype != torch.float32:
        return
    # against the float linear: |dy| <= s_a/2 ||w_o||_1 + s_w,o/2 ||x||_1 + in s_a s_w,o / 4
    dense = x @ w.T + bias
    bound = (sa / 2 * w.abs().sum(-1) + sw / 2 * x.abs().sum(-1, keepdim=True) + 96 * sa * sw / 4)
    within(y - dense, bound)
    # with the dequantized weight, only the activation's rounding remains: s_a/2 ||w_o||_1
    within(y - (x @ (qw.float() * sw[:, None]).T + bias), sa / 2 * (qw.float() * sw[:, None]).abs().sum(-1))


# -- W4A16 / W8A16 ------------------------------------------------------------------------------------------------
def _int4_asymmetric(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed uint8 (in, out/2), scale, offset), groups of ``group`` input rows (0: per channel)."""
    n_in, n_out = w.shape
    g = group or n_in
    wg = w.view(n_in // g, g, n_out)
    lo, hi = wg.amin(1), wg.amax(1)
    scale = (hi - lo) / 15
    offset = torch.round(-lo / scale)
    q = (torch.round(wg / scale[:, None]) + offset[:, None]).clamp(0, 15).to(torch.uint8).view(n_in, n_out)
    packed = q[:, 0::2] | (q[:, 1::2] << 4)
    if not group:
        scale, offset = scale[0], offset[0]
    return packed, scale, offset


@pytest.mark.parametrize("group", [0, 32])
def test_w4a16_within_bound(group):
    x, w, bias = _randn(5, 128, seed=13), _randn(128, 40, seed=14) * 0.05, _randn(40, seed=15)
    packed, scale, offset = _int4_asymmetric(w, group)
    y = llm.weight_quant_matmul(x, packed, scale, offset, bias, group_size=group)
    step = scale.repeat_interleave(group, 0) if group else scale.expand(128, 40)   # (in, out)
    within(y - (x @ w + bias), (x.abs() @ step) / 2)  # |dy_o| <= sum_i |x_i| s_{g(i),o} / 2
    assert not torch.equal(y, x @ w + bias)


def test_int4_symmetric_default_offset_and_int8_weights():
    x, w = _randn(4, 64, seed=16), _randn(64, 24, seed=17)
    scale = w.abs().amax(0) / 7
    q = (torch.round(w / scale) + 8).clamp(0, 15).to(torch.uint8)
    y = llm.weight_quant_matmul(x, q[:, 0::2] | (q[:, 1::2] << 4), scale)  # offset None: 8
    within(y - x @ w, (x.abs().sum(-1, keepdim=True) * scale) / 2)
    s8 = w.abs().amax(0) / 127
    y8 = llm.weight_quant_matmul(x, torch.round(w / s8).to(torch.int8), s8)  # offset None: 0
    within(y8 - x @ w, (x.abs().sum(-1, keepdim=True) * s8) / 2)
    with pytest.raises(ValueError, match="scale"):
        llm.weight_quant_matmul(x, q, scale[:5])
    with pytest.raises(ValueError, match="group_size"):
        llm.weight_quant_matmul(x, q, scale.expand(2, 24), group_size=48)
