"""The matmul, conv_pool, norm, random, optim, vision and llm families: table floors, packet mapping, the
``diopi::`` custom operators and host reference kernels checked against independent formulas, and their
conformance configs expanding into cases whose CPU references run."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import diopi
from diopi import host_kernels_norm as hk
from diopi.registry import functions

#: The number of functions each family reached; a later edit may add, never silently drop.
FLOORS = {"matmul": 32, "conv_pool": 28, "norm": 17, "random": 18, "optim": 44, "vision": 23, "llm": 14}

#: Functions this change added, with one packet each that must map to it.
NEW = {
    "diopiAddmv": "addmv_", "diopiAddr": "addr", "diopiAddbmm": "addbmm_", "diopiAddmmActivation": "_addmm_activation",
    "diopiLinear": "linear", "diopiCdist": "_cdist_forward", "diopiCdistBackward": "_cdist_backward",
    "diopiPdist": "_pdist_forward", "diopiPdistBackward": "_pdist_backward", "diopiLinalgCross": "linalg_cross",
    "diopiCholesky": "cholesky", "diopiCholeskySolve": "_cholesky_solve_helper",
    "diopiCholeskyInverse": "cholesky_inverse", "diopiInv": "linalg_inv_ex", "diopiLinalgSolve": "_linalg_solve_ex",
    "diopiLuFactor": "linalg_lu_factor_ex", "diopiLu": "linalg_lu", "diopiLuSolve": "linalg_lu_solve",
    "diopiLuUnpack": "lu_unpack", "diopiQr": "linalg_qr", "diopiSvd": "_linalg_svd", "diopiEigh": "_linalg_eigh",
    "diopiDet": "_linalg_det", "diopiSlogdet": "_linalg_slogdet", "diopiTriangularSolve": "linalg_solve_triangular",
    "diopiMatrixExp": "linalg_matrix_exp",
    "diopiReflectionPadBackward": "reflection_pad3d_backward",
    "diopiReplicationPadBackward": "replication_pad1d_backward", "diopiMaxPool3d": "max_pool3d_with_indices",
    "diopiMaxPool3dBackward": "max_pool3d_with_indices_backward", "diopiAvgPool3d": "avg_pool3d",
    "diopiAvgPool3dBackward": "avg_pool3d_backward", "diopiAdaptiveAvgPool3d": "_adaptive_avg_pool3d",
    "diopiAdaptiveAvgPool3dBackward": "_adaptive_avg_pool3d_backward", "diopiAdaptiveMaxPool2d": "adaptive_max_pool2d",
    "diopiAdaptiveMaxPool2dBackward": "adaptive_max_pool2d_backward", "diopiAdaptiveMaxPool3d": "adaptive_max_pool3d",
    "diopiAdaptiveMaxPool3dBackward": "adaptive_max_pool3d_backward",
    "diopiFractionalMaxPool2d": "fractional_max_pool2d",
    "diopiFractionalMaxPool2dBackward": "fractional_max_pool2d_backward",
    "diopiFractionalMaxPool3d": "fractional_max_pool3d",
    "diopiFractionalMaxPool3dBackward": "fractional_max_pool3d_backward", "diopiMaxUnpool2d": "max_unpool2d",
    "diopiMaxUnpool3d": "max_unpool3d",
    "diopiBatchNormUpdateStats": "batch_norm_update_stats", "diopiBatchNormStats": "batch_norm_stats",
    "diopiBatchNormGatherStatsWithCounts": "batch_norm_gather_stats_with_counts",
    "diopiBatchNormElemt": "batch_norm_elemt", "diopiBatchNormBackwardReduce": "batch_norm_backward_reduce",
    "diopiBatchNormBackwardElemt": "batch_norm_backward_elemt", "diopiRMSNorm": "rms_norm",
    "diopiWeightNorm": "_weight_norm_interface", "diopiWeightNormBackward": "_weight_norm_interface_backward",
    "diopiRenorm": "renorm_",
    "diopiCauchy": "cauchy_", "diopiGeometric": "geometric_", "diopiLogNormal": "log_normal_",
    "diopiPoisson": "poisson", "diopiBinomial": "binomial", "diopiStandardGamma": "_standard_gamma",
    "diopiStandardGammaGrad": "_standard_gamma_grad", "diopiSampleDirichlet": "_sample_dirichlet",
    "diopiDirichletGrad": "_dirichlet_grad",
    "diopiFusedAdam": "_fused_adam_", "diopiFusedAdamW": "_fused_adamw_", "diopiFusedSgd": "_fused_sgd_",
    "diopiFusedAdagrad": "_fused_adagrad_",
    "diopiAmpForeachNonFiniteCheckAndUnscale": "_amp_foreach_non_finite_check_and_unscale_",
    "diopiAmpUpdateScale": "_amp_update_scale_", "diopiForeachMinimum": "_foreach_minimum_",
    "diopiForeachClampMin": "_foreach_clamp_min", "diopiForeachClampMax": "_foreach_clamp_max_",
    "diopiForeachMax": "_foreach_max", "diopiForeachAbs": "_foreach_abs", "diopiForeachSign": "_foreach_sign",
    "diopiForeachReciprocal": "_foreach_reciprocal_", "diopiForeachRsqrt": "_foreach_rsqrt",
    "diopiForeachExp": "_foreach_exp", "diopiForeachExpm1": "_foreach_expm1", "diopiForeachLog": "_foreach_log_",
    "diopiForeachLog1p": "_foreach_log1p", "diopiForeachLog2": "_foreach_log2", "diopiForeachLog10": "_foreach_log10",
    "diopiForeachSigmoid": "_foreach_sigmoid", "diopiForeachTanh": "_foreach_tanh", "diopiForeachSin": "_foreach_sin",
    "diopiForeachCos": "_foreach_cos", "diopiForeachErf": "_foreach_erf", "diopiForeachFloor": "_foreach_floor",
    "diopiForeachCeil": "_foreach_ceil", "diopiForeachRound": "_foreach_round", "diopiForeachTrunc": "_foreach_trunc",
    "diopiForeachFrac": "_foreach_frac",
    "diopiUpsampleNearestBackward": "upsample_nearest2d_backward",
    "diopiUpsampleNearestExact": "_upsample_nearest_exact2d",
    "diopiUpsampleNearestExactBackward": "_upsample_nearest_exact1d_backward",
    "diopiUpsampleLinearBackward": "upsample_bilinear2d_backward", "diopiUpsampleTrilinear3d": "upsample_trilinear3d",
    "diopiUpsampleTrilinear3dBackward": "upsample_trilinear3d_backward",
    "diopiUpsampleBicubic2d": "upsample_bicubic2d", "diopiUpsampleBicubic2dBackward": "upsample_bicubic2d_backward",
    "diopiUpsampleAntialias": "_upsample_bilinear2d_aa",
    "diopiUpsampleAntialiasBackward": "_upsample_bicubic2d_aa_backward", "diopiGridSampler2d": "grid_sampler_2d",
    "diopiGridSampler2dBackward": "grid_sampler_2d_backward", "diopiGridSampler3d": "grid_sampler_3d",
    "diopiGridSampler3dBackward": "grid_sampler_3d_backward", "diopiAffineGridGenerator": "affine_grid_generator",
    "diopiPixelShuffle": "pixel_shuffle", "diopiPixelUnshuffle": "pixel_unshuffle",
    "diopiChannelShuffle": "channel_shuffle", "diopiRoiAlign": "diopi::roi_align",
    "diopiRoiAlignBackward": "diopi::roi_align_backward", "diopiNms": "diopi::nms",
    "diopiFusedRMSNorm": "diopi::rms_norm", "diopiFusedRMSNormBackward": "diopi::rms_norm_backward",
    "diopiAddRMSNorm": "diopi::add_rms_norm", "diopiRotaryEmbedding": "diopi::rotary_embedding",
    "diopiRotaryEmbeddingBackward": "diopi::rotary_embedding_backward", "diopiSiluAndMul": "diopi::silu_and_mul",
    "diopiSiluAndMulBackward": "diopi::silu_and_mul_backward",
    "diopiFlashAttentionVarlen": "diopi::flash_attention_varlen",
    "diopiFlashAttentionVarlenBackward": "diopi::flash_attention_varlen_backward",
    "diopiPagedAttentionDecode": "diopi::paged_attention_decode", "diopiReshapeAndCache": "diopi::reshape_and_cache",
    "diopiMoeGatingTopkSoftmax": "diopi::moe_gating_topk_softmax",
}

F64 = torch.float64


def _mine() -> list[diopi.DiopiFunction]:
    return [fn for fn in functions() if fn.family in FLOORS]


def test_family_floors() -> None:
    counts = {family: sum(fn.family == family for fn in functions()) for family in FLOORS}
    assert all(counts[f] >= floor for f, floor in FLOORS.items()), counts


def test_new_functions_map_their_packets() -> None:
    for name, packet in NEW.items():
        fn = diopi.function_for_aten(packet)
        assert fn is not None and fn.name == name, (name, packet, fn)


def test_every_row_is_documented_and_every_packet_exists() -> None:
    for fn in _mine():
        assert fn.summary, fn.name
        assert fn.backward is None or diopi.get_function(fn.backward).name == fn.backward
        for packet in fn.aten:
            assert diopi.registry.operator_packet(packet) is not None, (fn.name, packet)
            assert diopi.function_for_aten(packet) is fn


def test_every_function_of_the_families_has_configs_whose_first_case_runs_on_the_cpu() -> None:
    """Each function's first ``op`` case (or its first recorded call) runs through the function's reference and
    agrees with the operator called on the CPU."""
    from diopi.conformance.cases import build_call
    from diopi.conformance.gen import run_recipe
    from diopi.conformance.suite import load_suite

    suite = load_suite(list(FLOORS))
    missing = [fn.name for fn in _mine() if fn.name not in suite.configs]
    assert not missing
    for fn in _mine():
        cases, recipes = suite.expand(fn.name)
        if cases:
            op, args, kwargs = build_call(cases[0])
        else:
            call = run_recipe(recipes[0])[0]
            op, args, kwargs = call.op, call.args, call.kwargs
        if fn.is_random or op.name().startswith("aten::batch_norm_") or "rms_norm_backward" in op.name() \
                and op.namespace == "aten":
            continue  # random: statistics only; CUDA-only operators: checked against formulas below
        want = op(*_clone(args), **_clone(kwargs))
        got = fn.reference(op, *_clone(args), **_clone(kwargs))
        torch.testing.assert_close(got, want, equal_nan=True, msg=fn.name)


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------- llm custom ops
def _grads(fn, *inputs: torch.Tensor, seed: int = 0) -> tuple:
    """Run ``fn`` on fresh leaves and backward with a fixed random gradient; the output and input gradients."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    out.backward(grad)
    return (out.detach(), *[leaf.grad for leaf in leaves])


def test_rms_norm_and_its_backward_match_the_unfused_computation() -> None:
    x, w = torch.randn(3, 5, 16, dtype=F64), torch.randn(16, dtype=F64)
    fused = _grads(lambda a, b: torch.ops.diopi.rms_norm(a, b, 1e-6), x, w)
    plain = _grads(lambda a, b: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * b, x, w)
    for got, want in zip(fused, plain, strict=True):
        torch.testing.assert_close(got, want)
    _, rstd = torch.ops.diopi.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(rstd, 1 / x.pow(2).mean(-1).add(1e-6).sqrt())


def test_rms_norm_half_input_accumulates_in_float32() -> None:
    x, w = torch.randn(4, 64).half(), torch.randn(64).half()
    out, rstd = torch.ops.diopi.rms_norm(x, w, 1e-6)
    assert out.dtype == torch.float16 and rstd.dtype == torch.float32
    torch.testing.assert_close(out, F.rms_norm(x.float(), [64], w.float(), 1e-6).half())


def test_add_rms_norm_is_the_residual_add_then_rms_norm() -> None:
    x, r, w = torch.randn(4, 8, dtype=F64), torch.randn(4, 8, dtype=F64), torch.randn(8, dtype=F64)
    out, residual, _ = torch.ops.diopi.add_rms_norm(x, r, w, 1e-5)
    torch.testing.assert_close(residual, x + r)
    torch.testing.assert_close(out, F.rms_norm(x + r, [8], w, 1e-5))


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_is_a_complex_rotation(interleaved: bool) -> None:
    b, s, h, d = 2, 5, 3, 8
    x = torch.randn(b, s, h, d, dtype=F64)
    theta = torch.randn(s, 1, d // 2, dtype=F64)
    # the pairs as complex numbers, each multiplied by exp(i theta)
    pairs = x.unflatten(-1, (d // 2, 2)) if interleaved else torch.stack(x.chunk(2, -1), -1)
    rotated = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * torch.polar(torch.ones_like(theta), theta))
    want = rotated.flatten(-2) if interleaved else torch.cat((rotated[..., 0], rotated[..., 1]), -1)
    fused = _grads(lambda a: torch.ops.diopi.rotary_embedding(a, theta.cos(), theta.sin(), interleaved), x)
    torch.testing.assert_close(fused[0], want)
    # the gradient of a rotation is the inverse rotation of the output gradient
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=F64)
    back = torch.ops.diopi.rotary_embedding(grad, theta.cos(), -theta.sin(), interleaved)
    torch.testing.assert_close(fused[1], back)


def test_silu_and_mul_and_backward_match_autograd_of_the_unfused_computation() -> None:
    x = torch.randn(4, 3, 10, dtype=F64)
    fused = _grads(torch.ops.diopi.silu_and_mul, x)
    plain = _grads(lambda a: F.silu(a[..., :5]) * a[..., 5:], x)
    for got, want in zip(fused, plain, strict=True):
        torch.testing.assert_close(got, want)


def _sdpa_per_sequence(q, k, v, lens_q, lens_k, causal, scale):
    """The unfused reference: each sequence by itself, kv heads repeated for grouped-query attention, a causal
    mask aligned to the bottom right."""
    group = q.shape[1] // k.shape[1]
    outs, q0, k0 = [], 0, 0
    for lq, lk in zip(lens_q, lens_k, strict=True):
        qs = q[q0:q0 + lq].transpose(0, 1)
        ks = k[k0:k0 + lk].transpose(0, 1).repeat_interleave(group, 0)
        vs = v[k0:k0 + lk].transpose(0, 1).repeat_interleave(group, 0)
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale).transpose(0, 1))
        q0, k0 = q0 + lq, k0 + lk
    return torch.cat(outs)


@pytest.mark.parametrize(("lens_q", "lens_k", "causal"), [([3, 5, 2], [3, 5, 2], True), ([2, 4], [5, 4], False),
                                                          ([2, 4], [5, 4], True)])
def test_flash_attention_varlen_matches_attention_per_sequence(lens_q, lens_k, causal) -> None:
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(sum(lens_q), 4, 8, dtype=F64, generator=gen)
    k = torch.randn(sum(lens_k), 2, 8, dtype=F64, generator=gen)
    v = torch.randn(sum(lens_k), 2, 6, dtype=F64, generator=gen)
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    fused = _grads(lambda a, b, c: torch.ops.diopi.flash_attention_varlen(a, b, c, cu_q, cu_k, max(lens_q),
                                                                          max(lens_k), 0.3, causal), q, k, v)
    plain = _grads(lambda a, b, c: _sdpa_per_sequence(a, b, c, lens_q, lens_k, causal, 0.3), q, k, v)
    for got, want in zip(fused, plain, strict=True):
        torch.testing.assert_close(got, want)


def test_flash_attention_varlen_row_without_keys_is_zero() -> None:
    q, k, v = torch.randn(3, 1, 4), torch.randn(1, 1, 4), torch.randn(1, 1, 4)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    out, lse = torch.ops.diopi.flash_attention_varlen(q, k, v, cu, torch.tensor([0, 1], dtype=torch.int32), 3, 1,
                                                      1.0, True)
    assert torch.equal(out[:2], torch.zeros(2, 1, 4)) and torch.isinf(lse[0, :2]).all()
    torch.testing.assert_close(out[2], v[0])


def test_paged_attention_decode_matches_attention_over_the_gathered_cache() -> None:
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 8, dtype=F64, generator=gen)
    kc, vc = torch.randn(6, 4, 2, 8, dtype=F64, generator=gen), torch.randn(6, 4, 2, 8, dtype=F64, generator=gen)
    tables = torch.tensor([[5, 0, 3], [2, 4, 1]], dtype=torch.int32)
    lens = [9, 3]
    out = torch.ops.diopi.paged_attention_decode(q, kc, vc, tables, torch.tensor(lens, dtype=torch.int32), 0.25)
    for b, n in enumerate(lens):
        keys = torch.cat([kc[i] for i in tables[b].tolist()])[:n]
        values = torch.cat([vc[i] for i in tables[b].tolist()])[:n]
        want = _sdpa_per_sequence(q[b:b + 1], keys, values, [1], [n], False, 0.25)[0]
        torch.testing.assert_close(out[b], want)


def test_reshape_and_cache_writes_slots_in_place_and_skips_padding() -> None:
    key, value = torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    kc, vc = torch.zeros(4, 2, 2, 4), torch.zeros(4, 2, 2, 4)
    torch.ops.diopi.reshape_and_cache(key, value, kc, vc, torch.tensor([5, -1, 0]))
    assert torch.equal(kc[2, 1], key[0]) and torch.equal(vc[0, 0], value[2])
    assert int((kc != 0).any(-1).any(-1).sum()) == 2  # two slots written, the padding token nowhere


def test_moe_gating_topk_softmax_matches_softmax_then_topk() -> None:
    logits = torch.randn(6, 8)
    weights, indices = torch.ops.diopi.moe_gating_topk_softmax(logits, 2, True)
    probs, want_idx = torch.softmax(logits, -1).topk(2, -1)
    assert torch.equal(indices, want_idx)
    torch.testing.assert_close(weights, probs / probs.sum(-1, keepdim=True))


# ---------------------------------------------------------------------------------------------- vision custom ops
def _bilinear(feature: torch.Tensor, y: float, x: float) -> torch.Tensor:
    """ROI Align's bilinear sample of ``feature`` ``[C, H, W]`` at (y, x), written one point at a time."""
    height, width = feature.shape[1:]
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return feature.new_zeros(feature.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    y1, x1 = (y0 + 1, x0 + 1)
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * feature[:, y0, x0] + (1 - ly) * lx * feature[:, y0, x1]
            + ly * (1 - lx) * feature[:, y1, x0] + ly * lx * feature[:, y1, x1])


def _roi_align_naive(input, rois, scale, ph, pw, ratio, aligned):
    out = []
    for roi in rois.tolist():
        offset = 0.5 if aligned else 0.0
        x1, y1, x2, y2 = (c * scale - offset for c in roi[1:])
        w, h = x2 - x1, y2 - y1
        if not aligned:
            w, h = max(w, 1.0), max(h, 1.0)
        gh = ratio if ratio > 0 else math.ceil(h / ph)
        gw = ratio if ratio > 0 else math.ceil(w / pw)
        bins = torch.stack([torch.stack([
            sum(_bilinear(input[int(roi[0])], y1 + i * h / ph + (a + 0.5) * h / ph / gh,
                          x1 + j * w / pw + (b + 0.5) * w / pw / gw) for a in range(gh) for b in range(gw)) / (gh * gw)
            for j in range(pw)], -1) for i in range(ph)], -2)
        out.append(bins)
    return torch.stack(out)


@pytest.mark.parametrize(("ratio", "aligned", "scale"), [(2, False, 1.0), (0, True, 0.5), (0, False, 0.25)])
def test_roi_align_and_backward_match_a_pointwise_implementation(ratio, aligned, scale) -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 7, 9, dtype=F64, generator=gen)
    rois = torch.tensor([[0, 1.0, 0.5, 6.5, 5.0], [1, -2.0, 3.0, 40.0, 30.0], [1, 3.0, 3.0, 3.2, 3.1]], dtype=F64)
    fused = _grads(lambda a: torch.ops.diopi.roi_align(a, rois, scale, 2, 3, ratio, aligned), x)
    naive = _grads(lambda a: _roi_align_naive(a, rois, scale, 2, 3, ratio, aligned), x)
    for got, want in zip(fused, naive, strict=True):
        torch.testing.assert_close(got, want)


def test_nms_keeps_greedily_by_score() -> None:
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 9.0], [21, 21, 29, 29.0]])
    scores = torch.tensor([0.9, 0.95, 0.5, 0.3, 0.6])
    # 1 (0.95) suppresses 0 (IoU 0.68) and 3; 4 (0.6) suppresses 2 (IoU 0.64)
    assert torch.ops.diopi.nms(boxes, scores, 0.5).tolist() == [1, 4]
    assert torch.ops.diopi.nms(boxes, scores, 0.99).tolist() == [1, 0, 4, 2, 3]
    assert torch.ops.diopi.nms(boxes[:0], scores[:0], 0.5).tolist() == []


# ---------------------------------------------------------------------------------------------- host kernels
def test_sync_batch_norm_kernels_match_batch_norm_over_the_whole_batch() -> None:
    """Two "ranks" each computing local statistics, gathered, then normalization and backward from the global
    sums: the same as batch norm over the concatenated batch."""
    gen = torch.Generator().manual_seed(4)
    parts = [torch.randn(3, 4, 5, dtype=F64, generator=gen), torch.randn(5, 4, 5, dtype=F64, generator=gen)]
    weight, bias = torch.randn(4, dtype=F64, generator=gen), torch.randn(4, dtype=F64, generator=gen)
    stats = [hk.batch_norm_stats(None, p, 1e-5) for p in parts]
    counts = torch.tensor([p.numel() / 4 for p in parts], dtype=F64)
    running_mean, running_var = torch.zeros(4, dtype=F64), torch.ones(4, dtype=F64)
    mean, invstd = hk.batch_norm_gather_stats_with_counts(
        None, parts[0], torch.stack([s[0] for s in stats]), torch.stack([s[1] for s in stats]), running_mean,
        running_var, 0.1, 1e-5, counts)
    whole = torch.cat(parts).requires_grad_(True)
    want_rm, want_rv = torch.zeros(4, dtype=F64), torch.ones(4, dtype=F64)
    want = F.batch_norm(whole, want_rm, want_rv, weight, bias, training=True, momentum=0.1, eps=1e-5)
    torch.testing.assert_close((running_mean, running_var), (want_rm, want_rv))
    out = torch.cat([hk.batch_norm_elemt(None, p, weight, bias, mean, invstd, 1e-5) for p in parts])
    torch.testing.assert_close(out, want.detach())
    grad = torch.randn(want.shape, dtype=F64, generator=gen)
    want.backward(grad)
    grads = grad.split([3, 5])
    reduced = [hk.batch_norm_backward_reduce(None, g, p, mean, invstd, weight, True, True, True)
               for g, p in zip(grads, parts, strict=True)]
    sum_dy, sum_dy_xmu = sum(r[0] for r in reduced), sum(r[1] for r in reduced)
    count = torch.tensor([15, 25], dtype=torch.int32)
    grad_input = torch.cat([hk.batch_norm_backward_elemt(None, g, p, mean, invstd, weight, sum_dy, sum_dy_xmu, count)
                            for g, p in zip(grads, parts, strict=True)])
    torch.testing.assert_close(grad_input, whole.grad)
    assert hk.batch_norm_backward_reduce(None, grads[0], parts[0], mean, invstd, weight, False, False, True)[:3] == (
        None, None, None)


def test_fused_rms_norm_backward_host_kernel_matches_autograd() -> None:
    x, w = torch.randn(3, 4, 5, dtype=F64, requires_grad=True), torch.randn(4, 5, dtype=F64, requires_grad=True)
    out = F.rms_norm(x, [4, 5], w, 1e-5)
    grad = torch.randn(out.shape, dtype=F64)
    out.backward(grad)
    rstd = torch.rsqrt(x.detach().pow(2).mean((1, 2), keepdim=True) + 1e-5)
    op = torch.ops.aten._fused_rms_norm_backward.default
    got = diopi.get_function("diopiRMSNormBackward").reference(op, grad, x.detach(), [4, 5], rstd, w.detach(),
                                                               [True, True])
    torch.testing.assert_close(got, (x.grad, w.grad))


# ---------------------------------------------------------------------------------------------- dipu end to end
def test_custom_ops_reach_the_vendor_on_dipu_forward_and_backward() -> None:
    torch_dipu = pytest.importorskip("torch_dipu")
    from torch_dipu.vendors import droplet

    x, w = torch.randn(2, 8), torch.randn(8)

    def run() -> tuple[torch.Tensor, Counter[str]]:
        xd = x.to("dipu").requires_grad_(True)
        with torch_dipu.count_function_calls() as counter:
            torch.ops.diopi.rms_norm(xd, w.to("dipu"), 1e-6)[0].sum().backward()
        return xd.grad.cpu(), counter

    clean, counter = run()
    assert counter["diopiFusedRMSNorm"] == 1 and counter["diopiFusedRMSNormBackward"] == 1
    with droplet.switches(faults="diopi::rms_norm_backward:bias:0.5"):
        faulty, _ = run()
    torch.testing.assert_close(faulty, clean + 0.5)
