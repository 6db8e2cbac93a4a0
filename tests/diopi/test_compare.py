"""Tests for diopi.compare: verdicts, metrics, messages, nested outputs and tolerance overrides."""

from __future__ import annotations

import collections
import math
import os

import pytest
import torch

from diopi.compare import Verdict, all_passed, compare_outputs, compare_tensors, tolerance


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AUTOCOMPARE_ERROR_TOLERANCE"):
            monkeypatch.delenv(name)


def test_identical_is_pass_with_zero_errors() -> None:
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    r = compare_tensors(x.clone(), x)
    assert r.verdict is Verdict.PASS
    assert (r.max_abs_error, r.max_rel_error, r.mismatch_ratio) == (0.0, 0.0, 0.0)
    assert r.cosine_similarity == pytest.approx(1.0)
    assert (r.atol, r.rtol) == (1e-5, 1.3e-6)
    assert r.path == "out" and r.message.startswith("PASS out")


def test_both_zero_and_empty_pass() -> None:
    z = torch.zeros(3)
    assert compare_tensors(z, z.clone()).cosine_similarity == 1.0
    e = compare_tensors(torch.empty(0, 3), torch.empty(0, 3))
    assert e.verdict is Verdict.PASS and e.cosine_similarity == 1.0


def test_perturbation_fails_naming_worst_element() -> None:
    expected = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    actual = expected.clone()
    actual[1, 2] += 0.5
    actual[0, 1] += 0.1
    before = actual.clone()
    r = compare_tensors(actual, expected)
    assert r.verdict is Verdict.FAIL
    assert r.max_abs_error == pytest.approx(0.5)
    assert r.max_rel_error == pytest.approx(0.1)  # 0.1 / 1.0 at (0, 1)
    assert r.mismatch_ratio == pytest.approx(2 / 12)
    assert "index (1, 2)" in r.message and "2/12" in r.message
    assert "\n" not in r.message
    assert torch.equal(actual, before)  # inputs are never modified


def test_explicit_tolerance_overrides_default() -> None:
    expected = torch.ones(3)
    r = compare_tensors(expected + 0.05, expected, atol=0.1, rtol=0.0)
    assert r.verdict is Verdict.PASS and (r.atol, r.rtol) == (0.1, 0.0)


def _bf16_mul_sub() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a * b - c`` where ``c`` is ``a * b`` rounded: CPU rounds the product first, a fused device does not."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(1000, generator=g).bfloat16(), torch.randn(1000, generator=g).bfloat16()
    c = (a.float() * b.float()).bfloat16()
    expected = a * b - c  # CPU, bfloat16: exactly zero
    fused = (a.float() * b.float() - c.float()).bfloat16()  # one rounding at the end
    fp64 = a.double() * b.double() - c.double()
    return fused, expected, fp64


def test_bf16_rounding_difference_is_noise() -> None:
    actual, expected, fp64 = _bf16_mul_sub()
    assert compare_tensors(actual, expected).verdict is Verdict.FAIL  # outside tolerance on its own
    r = compare_tensors(actual, expected, expected_fp64=fp64)
    assert r.verdict is Verdict.PASS_NOISE
    assert r.error_vs_fp64 is not None and r.cpu_error_vs_fp64 is not None
    assert r.error_vs_fp64 < r.cpu_error_vs_fp64
    assert r.message.startswith("PASS (noise) out")
    assert all_passed([r])


def test_bf16_large_bias_fails_even_with_fp64() -> None:
    actual, expected, fp64 = _bf16_mul_sub()
    r = compare_tensors(actual + 0.25, expected, expected_fp64=fp64)
    assert r.verdict is Verdict.FAIL
    assert r.error_vs_fp64 is not None and r.cpu_error_vs_fp64 is not None
    assert r.error_vs_fp64 > 2 * r.cpu_error_vs_fp64
    assert "error vs float64" in r.message
    assert not all_passed([r])


def test_noise_requires_exact_when_cpu_is_exact() -> None:
    fp64 = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    expected = fp64.float()
    r = compare_tensors(expected + 1e-3, expected, expected_fp64=fp64)
    assert r.cpu_error_vs_fp64 == 0.0 and r.verdict is Verdict.FAIL


def test_nan_inf_placement() -> None:
    nan, inf = math.nan, math.inf
    expected = torch.tensor([1.0, nan, inf, -inf])
    assert compare_tensors(expected.clone(), expected).verdict is Verdict.PASS
    r = compare_tensors(torch.tensor([nan, nan, inf, -inf]), expected, atol=1e30, rtol=1e30)
    assert r.verdict is Verdict.FAIL and "NaN/Inf" in r.message and "index (0,)" in r.message
    assert math.isfinite(r.max_abs_error)
    r = compare_tensors(torch.tensor([1.0, nan, -inf, -inf]), expected, atol=1e30, rtol=1e30)
    assert r.verdict is Verdict.FAIL and "index (2,)" in r.message
    fp64 = expected.double()
    noisy = compare_tensors(torch.tensor([nan, nan, inf, -inf]), expected, expected_fp64=fp64, noise_factor=1e9)
    assert noisy.verdict is Verdict.FAIL


def test_integer_and_bool_exact() -> None:
    expected = torch.tensor([1, 2, 3])
    assert compare_tensors(expected.clone(), expected).verdict is Verdict.PASS
    r = compare_tensors(torch.tensor([1, 2, 4]), expected, atol=10, rtol=10)
    assert r.verdict is Verdict.FAIL and r.max_abs_error == 1.0 and (r.atol, r.rtol) == (0.0, 0.0)
    assert "index (2,)" in r.message
    big = torch.tensor([2**62], dtype=torch.int64)
    assert compare_tensors(big + 1, big).verdict is Verdict.FAIL  # beyond float64 precision
    b = compare_tensors(torch.tensor([True, False]), torch.tensor([True, True]))
    assert b.verdict is Verdict.FAIL and b.mismatch_ratio == 0.5


def test_shape_dtype_type_mismatch_fail_without_raising() -> None:
    x = torch.ones(2, 3)
    r = compare_tensors(torch.ones(3, 2), x)
    assert r.verdict is Verdict.FAIL and "shape" in r.message and "(3, 2)" in r.message
    r = compare_tensors(x.double(), x)
    assert r.verdict is Verdict.FAIL and "dtype" in r.message and "torch.float64" in r.message
    r = compare_tensors(None, x)
    assert r.verdict is Verdict.FAIL and "NoneType" in r.message
    assert compare_tensors(torch.empty(2, 3, device="meta"), x).verdict is Verdict.FAIL


def test_complex_and_sparse() -> None:
    expected = torch.tensor([1 + 1j, 2 + 2j], dtype=torch.complex64)
    actual = expected.clone()
    actual[1] += 0.5j
    r = compare_tensors(actual, expected)
    assert r.verdict is Verdict.FAIL and "index (1,).imag" in r.message and r.max_abs_error == pytest.approx(0.5)
    assert compare_tensors(expected.conj(), expected.conj().resolve_conj()).verdict is Verdict.PASS
    dense = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    assert compare_tensors(dense.to_sparse(), dense).verdict is Verdict.PASS


def test_nested_outputs_paths() -> None:
    t = torch.ones(2)
    results = compare_outputs((t.clone(), 3, None), (t, 3, None))
    assert [r.path for r in results] == ["out[0]", "out[1]", "out[2]"]
    assert all_passed(results)
    results = compare_outputs((t.clone(), 4, None), (t, 3, None))
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.FAIL, Verdict.PASS]
    assert "out[1]" in results[1].message and results[1].max_abs_error == 1.0
    assert not all_passed(results)


def test_nested_structure_mismatches_are_fail_entries() -> None:
    t = torch.ones(2)
    (r,) = compare_outputs((t, t), (t,))
    assert r.verdict is Verdict.FAIL and "length" in r.message
    (r,) = compare_outputs([t], (t,))
    assert r.verdict is Verdict.FAIL and "tuple" in r.message
    (r,) = compare_outputs(None, t)
    assert r.verdict is Verdict.FAIL
    (r,) = compare_outputs(2.0, 2)
    assert r.verdict is Verdict.FAIL and "int" in r.message
    results = compare_outputs({"a": t, "c": 1}, {"a": t, "b": 1})
    assert [(r.path, r.verdict) for r in results] == [("out", Verdict.FAIL), ("out['a']", Verdict.PASS)]


def test_namedtuples_dicts_and_scalars() -> None:
    x = torch.tensor([[1.0, 5.0], [3.0, 2.0]])
    results = compare_outputs(torch.max(x, 0), torch.max(x, 0))
    assert [r.path for r in results] == ["out.values", "out.indices"] and all_passed(results)
    Pair = collections.namedtuple("Pair", ["lo", "hi"])
    results = compare_outputs({"p": Pair(1.0, torch.float32)}, {"p": Pair(1.0 + 1e-7, torch.float32)})
    assert [r.path for r in results] == ["out['p'].lo", "out['p'].hi"] and all_passed(results)
    (r,) = compare_outputs(1.1, 1.0)
    assert r.verdict is Verdict.FAIL and r.max_abs_error == pytest.approx(0.1)
    (r,) = compare_outputs(torch.float16, torch.float32)
    assert r.verdict is Verdict.FAIL


def test_nested_fp64_reference_is_walked() -> None:
    actual, expected, fp64 = _bf16_mul_sub()
    results = compare_outputs((actual, 1), (expected, 1), expected_fp64=(fp64, 1))
    assert [r.verdict for r in results] == [Verdict.PASS_NOISE, Verdict.PASS]


def test_tolerance_defaults() -> None:
    assert tolerance(torch.float16) == (1e-5, 1e-3)
    assert tolerance(torch.bfloat16) == (1e-5, 1.6e-2)
    assert tolerance(torch.float32) == (1e-5, 1.3e-6)
    assert tolerance(torch.float64) == (1e-7, 1e-7)
    assert tolerance(torch.complex64) == tolerance(torch.float32)
    assert tolerance(torch.int32) == (0.0, 0.0) and tolerance(torch.bool) == (0.0, 0.0)


def test_tolerance_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE_BFLOAT16", "1e-3,1e-2")
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE_BFLOAT16_ATEN_ADD_TENSOR", " 0.5 , 0.25 ")
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE_FLOAT32_TORCH_NN_FUNCTIONAL_LINEAR", "1e-2,1e-3")
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE_INT64", "1,1")  # integers stay exact
    assert tolerance(torch.bfloat16) == (1e-3, 1e-2)
    assert tolerance(torch.bfloat16, "aten.add.Tensor") == (0.5, 0.25)
    assert tolerance(torch.bfloat16, "aten.mul.Tensor") == (1e-3, 1e-2)
    assert tolerance(torch.float32, "torch.nn.functional.linear") == (1e-2, 1e-3)
    assert tolerance(torch.float32) == (1e-5, 1.3e-6)
    assert tolerance(torch.int64) == (0.0, 0.0)
    expected = torch.ones(4, dtype=torch.bfloat16)
    actual = expected + 0.25
    assert compare_tensors(actual, expected).verdict is Verdict.FAIL
    r = compare_tensors(actual, expected, op="aten.add.Tensor")
    assert r.verdict is Verdict.PASS and (r.atol, r.rtol) == (0.5, 0.25)
    assert all_passed(compare_outputs((actual,), (expected,), op="aten.add.Tensor"))


def test_generic_env_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE", "1e-4,1e-5")
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE_FLOAT16", "1e-3,1e-3")
    assert tolerance(torch.float32) == (1e-4, 1e-5)
    assert tolerance(torch.float16) == (1e-3, 1e-3)


@pytest.mark.parametrize("value", ["abc", "1e-3", "1,2,3", "-1,0", "nan,1", "1;2"])
def test_malformed_env_raises_naming_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    name = "AUTOCOMPARE_ERROR_TOLERANCE_FLOAT16_ATEN_ADD_TENSOR"
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        tolerance(torch.float16, "aten.add.Tensor")
