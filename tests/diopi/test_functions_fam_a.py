"""The functions added to the elementwise, activation, reduction, loss, indexing, shape and sort families: each
maps its ATen packets, its CPU reference matches the plain torch call, and every function of these families has
conformance configs that expand into cases."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import diopi

aten = torch.ops.aten
FAMILIES = ("elementwise", "activation", "reduction", "loss", "indexing", "shape", "sort")

#: The floor of functions per family reached here (a later edit must not silently drop functions).
FLOORS = {"elementwise": 99, "activation": 44, "reduction": 28, "loss": 20, "indexing": 23, "shape": 26, "sort": 5}

#: New functions and the packets they serve.
NEW_PACKETS = {
    "diopiAsinh": "asinh asinh_", "diopiAcosh": "acosh acosh_", "diopiAtanh": "atanh atanh_",
    "diopiErfc": "erfc erfc_", "diopiLgamma": "lgamma lgamma_", "diopiDigamma": "digamma digamma_",
    "diopiPolygamma": "polygamma polygamma_", "diopiMvlgamma": "mvlgamma mvlgamma_", "diopiI0": "i0 i0_",
    "diopiSpecialI0e": "special_i0e", "diopiSpecialI1": "special_i1", "diopiSpecialI1e": "special_i1e",
    "diopiSpecialErfcx": "special_erfcx", "diopiSpecialNdtri": "special_ndtri",
    "diopiSpecialLogNdtr": "special_log_ndtr", "diopiSpecialEntr": "special_entr", "diopiSpecialZeta": "special_zeta",
    "diopiIgamma": "igamma igamma_", "diopiIgammac": "igammac igammac_", "diopiSinc": "sinc sinc_",
    "diopiHypot": "hypot hypot_", "diopiLogAddExp": "logaddexp", "diopiLogAddExp2": "logaddexp2",
    "diopiXlogy": "xlogy xlogy_", "diopiXlog1py": "special_xlog1py", "diopiCopysign": "copysign copysign_",
    "diopiNextafter": "nextafter nextafter_", "diopiHeaviside": "heaviside heaviside_", "diopiLdexp": "ldexp ldexp_",
    "diopiFrexp": "frexp", "diopiDeg2Rad": "deg2rad deg2rad_", "diopiRad2Deg": "rad2deg rad2deg_",
    "diopiAngle": "angle", "diopiFloorDivide": "floor_divide floor_divide_", "diopiNanToNum": "nan_to_num nan_to_num_",
    "diopiLogicalXor": "logical_xor logical_xor_", "diopiBitwiseXor": "bitwise_xor bitwise_xor_",
    "diopiBitwiseLeftShift": "bitwise_left_shift bitwise_left_shift_ __lshift__ __ilshift__",
    "diopiBitwiseRightShift": "bitwise_right_shift bitwise_right_shift_ __rshift__ __irshift__",
    "diopiGcd": "gcd gcd_", "diopiLcm": "lcm lcm_", "diopiIsPosInf": "isposinf", "diopiIsNegInf": "isneginf",
    "diopiSignbit": "signbit",
    "diopiLogitBackward": "logit_backward", "diopiHardshrink": "hardshrink",
    "diopiHardshrinkBackward": "hardshrink_backward", "diopiSoftshrink": "softshrink",
    "diopiSoftshrinkBackward": "softshrink_backward", "diopiCelu": "celu celu_", "diopiMishBackward": "mish_backward",
    "diopiLogSigmoid": "log_sigmoid_forward", "diopiLogSigmoidBackward": "log_sigmoid_backward", "diopiGlu": "glu",
    "diopiGluBackward": "glu_backward", "diopiPrelu": "_prelu_kernel", "diopiPreluBackward": "_prelu_kernel_backward",
    "diopiRReluWithNoise": "rrelu_with_noise rrelu_with_noise_",
    "diopiRReluWithNoiseBackward": "rrelu_with_noise_backward",
    "diopiNanSum": "nansum", "diopiAminmax": "aminmax _aminmax", "diopiCountNonzero": "count_nonzero",
    "diopiMedian": "median", "diopiNanMedian": "nanmedian", "diopiMode": "mode", "diopiKthvalue": "kthvalue",
    "diopiTrace": "trace", "diopiHistc": "histc", "diopiBincount": "bincount", "diopiCummax": "cummax _cummax_helper",
    "diopiCummin": "cummin _cummin_helper", "diopiLogCumSumExp": "logcumsumexp _logcumsumexp",
    "diopiCrossEntropyLoss": "cross_entropy_loss", "diopiBCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "diopiHuberLoss": "huber_loss", "diopiHuberLossBackward": "huber_loss_backward",
    "diopiSoftMarginLoss": "soft_margin_loss", "diopiSoftMarginLossBackward": "soft_margin_loss_backward",
    "diopiMultiMarginLoss": "multi_margin_loss", "diopiMultiMarginLossBackward": "multi_margin_loss_backward",
    "diopiMultilabelMarginLoss": "multilabel_margin_loss_forward",
    "diopiMultilabelMarginLossBackward": "multilabel_margin_loss_backward", "diopiCTCLoss": "_ctc_loss",
    "diopiCTCLossBackward": "_ctc_loss_backward",
    "diopiEmbeddingRenorm": "embedding_renorm_", "diopiEmbeddingBag": "_embedding_bag _embedding_bag_forward_only",
    "diopiEmbeddingBagBackward": "_embedding_bag_backward _embedding_bag_dense_backward",
    "diopiIndexReduce": "index_reduce index_reduce_", "diopiTake": "take", "diopiPut": "put put_",
    "diopiSearchsorted": "searchsorted", "diopiBucketize": "bucketize",
    "diopiRot90": "rot90", "diopiRepeatInterleave": "repeat_interleave", "diopiDiagEmbed": "diag_embed",
    "diopiDiagonalCopy": "diagonal_copy", "diopiBlockDiag": "block_diag", "diopiNarrowCopy": "narrow_copy",
    "diopiEye": "eye", "diopiLogspace": "logspace", "diopiSliceScatter": "slice_scatter",
    "diopiSelectScatter": "select_scatter", "diopiDiagonalScatter": "diagonal_scatter",
    "diopiAsStridedScatter": "as_strided_scatter", "diopiDiagonalBackward": "diagonal_backward",
    "diopiUnfoldBackward": "unfold_backward",
    "diopiUnique": "_unique2 _unique", "diopiUniqueConsecutive": "unique_consecutive", "diopiUniqueDim": "unique_dim",
}


def _x(*shape: int, low: float = -2.0, high: float = 2.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(shape, generator=g, dtype=torch.float64)


X, Y, P = _x(3, 4), _x(3, 4, seed=1), _x(3, 4, low=0.1, high=3.0, seed=2)
U = _x(3, 4, low=-0.9, high=0.9, seed=3)
I1, I2 = torch.tensor([[12, -7, 30], [5, 0, 9]]), torch.tensor([[8, 3, 4], [2, 6, 1]])
SPECIAL = torch.tensor([1.5, -0.0, 0.0, float("inf"), float("-inf"), float("nan"), -2.0], dtype=torch.float64)
LABELS = torch.tensor([0, 3, 1])
GRAD = _x(3, 4, seed=4)

# (function, overload, args, kwargs, the same computed by public torch API)
CALLS: list[tuple[str, Any, tuple, dict, Callable[[], Any]]] = [
    ("diopiAsinh", aten.asinh.default, (X,), {}, lambda: torch.asinh(X)),
    ("diopiAcosh", aten.acosh.default, (P + 1,), {}, lambda: torch.acosh(P + 1)),
    ("diopiAtanh", aten.atanh.default, (U,), {}, lambda: torch.atanh(U)),
    ("diopiErfc", aten.erfc.default, (X,), {}, lambda: torch.erfc(X)),
    ("diopiLgamma", aten.lgamma.default, (P,), {}, lambda: torch.lgamma(P)),
    ("diopiDigamma", aten.digamma.default, (P,), {}, lambda: torch.digamma(P)),
    ("diopiPolygamma", aten.polygamma.default, (2, P), {}, lambda: torch.polygamma(2, P)),
    ("diopiMvlgamma", aten.mvlgamma.default, (P + 2, 3), {}, lambda: torch.mvlgamma(P + 2, 3)),
    ("diopiI0", aten.i0.default, (X,), {}, lambda: torch.i0(X)),
    ("diopiSpecialI0e", aten.special_i0e.default, (X,), {}, lambda: torch.special.i0e(X)),
    ("diopiSpecialI1", aten.special_i1.default, (X,), {}, lambda: torch.special.i1(X)),
    ("diopiSpecialI1e", aten.special_i1e.default, (X,), {}, lambda: torch.special.i1e(X)),
    ("diopiSpecialErfcx", aten.special_erfcx.default, (X,), {}, lambda: torch.special.erfcx(X)),
    ("diopiSpecialNdtri", aten.special_ndtri.default, (P / 4,), {}, lambda: torch.special.ndtri(P / 4)),
    ("diopiSpecialLogNdtr", aten.special_log_ndtr.default, (X,), {}, lambda: torch.special.log_ndtr(X)),
    ("diopiSpecialEntr", aten.special_entr.default, (P,), {}, lambda: torch.special.entr(P)),
    ("diopiSpecialZeta", aten.special_zeta.default, (P + 1, P), {}, lambda: torch.special.zeta(P + 1, P)),
    ("diopiIgamma", aten.igamma.default, (P, P.flip(0)), {}, lambda: torch.igamma(P, P.flip(0))),
    ("diopiIgammac", aten.igammac.default, (P, P.flip(0)), {}, lambda: torch.igammac(P, P.flip(0))),
    ("diopiSinc", aten.sinc.default, (X,), {}, lambda: torch.sinc(X)),
    ("diopiHypot", aten.hypot.default, (X, Y), {}, lambda: torch.hypot(X, Y)),
    ("diopiLogAddExp", aten.logaddexp.default, (X, Y), {}, lambda: torch.logaddexp(X, Y)),
    ("diopiLogAddExp2", aten.logaddexp2.default, (X, Y), {}, lambda: torch.logaddexp2(X, Y)),
    ("diopiXlogy", aten.xlogy.Tensor, (X, P), {}, lambda: torch.xlogy(X, P)),
    ("diopiXlog1py", aten.special_xlog1py.default, (X, P), {}, lambda: torch.special.xlog1py(X, P)),
    ("diopiCopysign", aten.copysign.Tensor, (X, Y), {}, lambda: torch.copysign(X, Y)),
    ("diopiNextafter", aten.nextafter.default, (X, Y), {}, lambda: torch.nextafter(X, Y)),
    ("diopiHeaviside", aten.heaviside.default, (X.round(), Y), {}, lambda: torch.heaviside(X.round(), Y)),
    ("diopiLdexp", aten.ldexp.Tensor, (X[:2], I2[:, :1]), {}, lambda: torch.ldexp(X[:2], I2[:, :1])),
    ("diopiFrexp", aten.frexp.Tensor, (SPECIAL,), {}, lambda: torch.frexp(SPECIAL)),
    ("diopiDeg2Rad", aten.deg2rad.default, (X,), {}, lambda: torch.deg2rad(X)),
    ("diopiRad2Deg", aten.rad2deg.default, (X,), {}, lambda: torch.rad2deg(X)),
    ("diopiAngle", aten.angle.default, (SPECIAL,), {}, lambda: torch.angle(SPECIAL)),
    ("diopiFloorDivide", aten.floor_divide.default, (X, P), {}, lambda: torch.floor_divide(X, P)),
    ("diopiNanToNum", aten.nan_to_num.default, (SPECIAL, 1.0), {}, lambda: torch.nan_to_num(SPECIAL, 1.0)),
    ("diopiLogicalXor", aten.logical_xor.default, (X > 0, Y > 0), {}, lambda: torch.logical_xor(X > 0, Y > 0)),
    ("diopiBitwiseXor", aten.bitwise_xor.Tensor, (I1, I2), {}, lambda: I1 ^ I2),
    ("diopiBitwiseLeftShift", aten.bitwise_left_shift.Tensor, (I1, I2), {}, lambda: I1 << I2),
    ("diopiBitwiseRightShift", aten.bitwise_right_shift.Tensor, (I1, I2), {}, lambda: I1 >> I2),
    ("diopiGcd", aten.gcd.default, (I1, I2), {}, lambda: torch.gcd(I1, I2)),
    ("diopiLcm", aten.lcm.default, (I1, I2), {}, lambda: torch.lcm(I1, I2)),
    ("diopiIsPosInf", aten.isposinf.default, (SPECIAL,), {}, lambda: torch.isposinf(SPECIAL)),
    ("diopiIsNegInf", aten.isneginf.default, (SPECIAL,), {}, lambda: torch.isneginf(SPECIAL)),
    ("diopiSignbit", aten.signbit.default, (SPECIAL,), {}, lambda: torch.signbit(SPECIAL)),
    ("diopiHardshrink", aten.hardshrink.default, (X, 0.5), {}, lambda: F.hardshrink(X, 0.5)),
    ("diopiSoftshrink", aten.softshrink.default, (X, 0.5), {}, lambda: F.softshrink(X, 0.5)),
    ("diopiCelu", aten.celu.default, (X, 2.0), {}, lambda: F.celu(X, 2.0)),
    ("diopiLogSigmoid", aten.log_sigmoid_forward.default, (X,), {}, lambda: F.logsigmoid(X)),
    ("diopiGlu", aten.glu.default, (X, -1), {}, lambda: F.glu(X, -1)),
    ("diopiPrelu", aten._prelu_kernel.default, (X, P[0]), {}, lambda: F.prelu(X, P[0])),
    ("diopiNanSum", aten.nansum.default, (SPECIAL[[0, 1, 5, 6]],), {}, lambda: torch.nansum(SPECIAL[[0, 1, 5, 6]])),
    ("diopiAminmax", aten.aminmax.default, (X,), {"dim": 1}, lambda: torch.aminmax(X, dim=1)),
    ("diopiCountNonzero", aten.count_nonzero.dim_IntList, (X.round(), [1]), {},
     lambda: torch.count_nonzero(X.round(), 1)),
    ("diopiMedian", aten.median.dim, (X, 1), {}, lambda: torch.median(X, 1)),
    ("diopiNanMedian", aten.nanmedian.default, (SPECIAL,), {}, lambda: torch.nanmedian(SPECIAL)),
    ("diopiMode", aten.mode.default, (X.round(), 1), {}, lambda: torch.mode(X.round(), 1)),
    ("diopiKthvalue", aten.kthvalue.default, (X, 2, 1), {}, lambda: torch.kthvalue(X, 2, 1)),
    ("diopiTrace", aten.trace.default, (X,), {}, lambda: torch.trace(X)),
    ("diopiHistc", aten.histc.default, (X, 5, -2, 2), {}, lambda: torch.histc(X, 5, -2, 2)),
    ("diopiBincount", aten.bincount.default, (I2.flatten(),), {}, lambda: torch.bincount(I2.flatten())),
    ("diopiCummax", aten.cummax.default, (X, 1), {}, lambda: torch.cummax(X, 1)),
    ("diopiCummin", aten.cummin.default, (X, 0), {}, lambda: torch.cummin(X, 0)),
    ("diopiLogCumSumExp", aten.logcumsumexp.default, (X, 1), {}, lambda: torch.logcumsumexp(X, 1)),
    ("diopiCrossEntropyLoss", aten.cross_entropy_loss.default, (X, LABELS), {}, lambda: F.cross_entropy(X, LABELS)),
    ("diopiBCEWithLogitsLoss", aten.binary_cross_entropy_with_logits.default, (X, P / 3), {},
     lambda: F.binary_cross_entropy_with_logits(X, P / 3)),
    ("diopiHuberLoss", aten.huber_loss.default, (X, Y, 1, 0.5), {}, lambda: F.huber_loss(X, Y, delta=0.5)),
    ("diopiSoftMarginLoss", aten.soft_margin_loss.default, (X, Y.sign(), 1), {},
     lambda: F.soft_margin_loss(X, Y.sign())),
    ("diopiMultiMarginLoss", aten.multi_margin_loss.default, (X, LABELS), {}, lambda: F.multi_margin_loss(X, LABELS)),
    ("diopiMultilabelMarginLoss", aten.multilabel_margin_loss_forward.default,
     (X, torch.tensor([[1, 2, -1, 0]] * 3), 1), {},
     lambda: F.multilabel_margin_loss(X, torch.tensor([[1, 2, -1, 0]] * 3))),
    ("diopiTake", aten.take.default, (X, I2.flatten()), {}, lambda: torch.take(X, I2.flatten())),
    ("diopiPut", aten.put.default, (X, I2[0], Y[0, :3], True), {},
     lambda: X.clone().put_(I2[0], Y[0, :3], accumulate=True)),
    ("diopiIndexReduce", aten.index_reduce.default, (X, 0, LABELS % 3, Y, "amax"), {},
     lambda: X.index_reduce(0, LABELS % 3, Y, "amax")),
    ("diopiSearchsorted", aten.searchsorted.Tensor, (X[0].sort().values, Y), {},
     lambda: torch.searchsorted(X[0].sort().values, Y)),
    ("diopiBucketize", aten.bucketize.Tensor, (Y, X[0].sort().values), {},
     lambda: torch.bucketize(Y, X[0].sort().values)),
    ("diopiRot90", aten.rot90.default, (X, 1, [0, 1]), {}, lambda: torch.rot90(X)),
    ("diopiRepeatInterleave", aten.repeat_interleave.Tensor, (I2[1],), {}, lambda: torch.repeat_interleave(I2[1])),
    ("diopiDiagEmbed", aten.diag_embed.default, (X, 1), {}, lambda: torch.diag_embed(X, 1)),
    ("diopiDiagonalCopy", aten.diagonal_copy.default, (X, -1), {}, lambda: torch.diagonal(X, -1)),
    ("diopiBlockDiag", aten.block_diag.default, ([X, Y[:1]],), {}, lambda: torch.block_diag(X, Y[:1])),
    ("diopiNarrowCopy", aten.narrow_copy.default, (X, 1, 1, 2), {}, lambda: X.narrow(1, 1, 2)),
    ("diopiEye", aten.eye.m, (3, 5), {}, lambda: torch.eye(3, 5)),
    ("diopiLogspace", aten.logspace.default, (0.0, 2.0, 5), {}, lambda: torch.logspace(0.0, 2.0, 5)),
    ("diopiSliceScatter", aten.slice_scatter.default, (X, Y[:, :2], 1, 1, 3), {},
     lambda: torch.slice_scatter(X, Y[:, :2], 1, 1, 3)),
    ("diopiSelectScatter", aten.select_scatter.default, (X, Y[0], 0, 2), {},
     lambda: torch.select_scatter(X, Y[0], 0, 2)),
    ("diopiDiagonalScatter", aten.diagonal_scatter.default, (X, Y[0, :3]), {},
     lambda: torch.diagonal_scatter(X, Y[0, :3])),
    ("diopiAsStridedScatter", aten.as_strided_scatter.default, (X, Y[0, :2], (2,), (5,)), {},
     lambda: torch.as_strided_scatter(X, Y[0, :2], (2,), (5,))),
    ("diopiUnique", aten._unique2.default, (I2, True, True, True), {},
     lambda: torch.unique(I2, sorted=True, return_inverse=True, return_counts=True)),
    ("diopiUniqueConsecutive", aten.unique_consecutive.default, (I2.flatten() % 2,), {},
     lambda: torch.unique_consecutive(I2.flatten() % 2)),
    ("diopiUniqueDim", aten.unique_dim.default, (I2 % 2, 1), {}, lambda: torch.unique(I2 % 2, dim=1)),
]


def _leaves(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.mark.parametrize("name,op,args,kwargs,expected", CALLS, ids=[c[0] for c in CALLS])
def test_reference_matches_torch(name: str, op: Any, args: tuple, kwargs: dict, expected: Callable[[], Any]) -> None:
    fn = diopi.get_function(name)
    assert diopi.function_for_aten(op) is fn
    got, want = _leaves(fn.reference(op, *args, **kwargs)), _leaves(expected())
    if name == "diopiLogSigmoid":  # (output, buffer): the buffer is the kernel's own
        got = got[:1]
    assert len(got) >= len(want)
    for g, w in zip(got, want, strict=False):
        torch.testing.assert_close(g, w, equal_nan=True)


def test_backward_references_match_autograd() -> None:
    """Each new backward function's reference gives the gradient autograd computes on the CPU."""
    x = X.clone().requires_grad_()
    checks = [
        ("diopiHardshrinkBackward", aten.hardshrink_backward.default, (GRAD, X, 0.5), F.hardshrink(x, 0.5)),
        ("diopiSoftshrinkBackward", aten.softshrink_backward.default, (GRAD, X, 0.5), F.softshrink(x, 0.5)),
        ("diopiGluBackward", aten.glu_backward.default, (GRAD[:, :2], X, -1), F.glu(x, -1)),
        ("diopiMishBackward", aten.mish_backward.default, (GRAD, X), F.mish(x)),
    ]
    for name, op, args, out in checks:
        (want,) = torch.autograd.grad(out, x, args[0])
        got = diopi.get_function(name).reference(op, *args)
        torch.testing.assert_close(got, want, msg=name)
    p = P.clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.logit(p / 4, 0.05), p, GRAD)
    got = diopi.get_function("diopiLogitBackward").reference(aten.logit_backward.default, GRAD, P / 4, 0.05) / 4
    torch.testing.assert_close(got, want)
    (want,) = torch.autograd.grad(F.huber_loss(x, Y, delta=0.5, reduction="sum"), x)
    got = diopi.get_function("diopiHuberLossBackward").reference(
        aten.huber_loss_backward.default, torch.tensor(1.0, dtype=torch.float64), X, Y, 2, 0.5)
    torch.testing.assert_close(got, want)


def test_new_packets_map_to_their_function() -> None:
    missing = []
    for name, packets in NEW_PACKETS.items():
        fn = diopi.get_function(name)
        assert fn.summary, name
        for packet in packets.split():
            assert getattr(torch.ops.aten, packet) is not None  # (not __getattr__: it would replace the cached packet)
            if diopi.function_for_aten(f"aten.{packet}") is not fn:
                missing.append(f"{name}: {packet}")
    assert not missing, missing
    assert diopi.get_function("diopiRReluWithNoise").is_random
    assert "backward" in diopi.get_function("diopiCTCLossBackward").tags
    assert diopi.get_function("diopiGlu").backward == "diopiGluBackward"


def test_family_floors() -> None:
    counts = collections.Counter(fn.family for fn in diopi.functions())
    for family, floor in FLOORS.items():
        assert counts[family] >= floor, f"{family}: {counts[family]} functions, floor {floor}"


def test_every_function_of_these_families_has_cases() -> None:
    from diopi.conformance.suite import load_suite

    suite = load_suite(FAMILIES)
    ours = [fn.name for fn in diopi.functions() if fn.family in FAMILIES]
    assert sorted(set(ours) - set(suite.configs)) == []
    total = 0
    for name in ours:
        cases, recipes = suite.expand(name)
        assert cases or recipes, name
        total += len(cases) + len(recipes)
    assert total >= 5600


def test_sorting_call_helpers() -> None:
    from diopi.conformance.configs.indexing import bucketize_on_sorted, searchsorted_on_sorted

    seq, values = torch.tensor([3.0, -1.0, 2.0, 0.5]), torch.tensor([-2.0, 0.5, 2.5, 9.0])
    # sorted: [-1, 0.5, 2, 3]; left insertion points of the values, counted by hand
    assert searchsorted_on_sorted(seq, values).tolist() == [0, 1, 3, 4]
    assert searchsorted_on_sorted(seq, values, right=True).tolist() == [0, 2, 3, 4]
    assert bucketize_on_sorted(values, seq).tolist() == [0, 1, 3, 4]


def test_droplet_fault_on_a_new_function_fails_exactly_its_cases(tmp_path) -> None:
    """The family configs of three new functions (a backward one among them) generate cases that pass on clean
    droplet, and a droplet fault on one function fails all its floating-point cases and no other case."""
    from diopi.case_format import load_case
    from diopi.conformance.gen import gen_function
    from diopi.conformance.run import ImplTarget, run_case
    from diopi.conformance.suite import load_suite

    chosen = ("diopiHuberLoss", "diopiHuberLossBackward", "diopiLogAddExp")
    suite = load_suite(FAMILIES)
    for function in chosen:
        cases, recipes = suite.expand(function)
        assert not gen_function(tmp_path, function, cases, recipes).errors

    def outcomes(**options: str) -> dict[str, set[str]]:
        target = ImplTarget.load("droplet", **options)
        by_function: dict[str, set[str]] = collections.defaultdict(set)
        for function in chosen:
            for case in sorted((tmp_path / function).iterdir()):
                result = run_case(case, target)
                by_function[function].add(result.outcome)
        return by_function

    assert outcomes() == {f: {"PASS"} for f in chosen}
    faulty = outcomes(faults="huber_loss_backward.default:bias")
    assert faulty["diopiHuberLoss"] == faulty["diopiLogAddExp"] == {"PASS"}
    # an empty gradient has nothing to bias: every case with elements fails
    target = ImplTarget.load("droplet", faults="huber_loss_backward.default:bias")
    for case in (tmp_path / "diopiHuberLossBackward").iterdir():
        output = load_case(case).record["tensors"]["o0"]
        expected = "PASS" if 0 in output["shape"] else "FAIL"
        assert run_case(case, target).outcome == expected, case.name
