"""Judging one case: outcomes against stub implementations, random checks, corrupted cases."""

from __future__ import annotations

import itertools
from pathlib import Path

import torch

from diopi.conformance.run import ImplTarget, make_target, run_case
from diopi.impls import UnsupportedDtypeError


def _cases(data: Path, function: str) -> list[Path]:
    return sorted(p for p in (data / function).iterdir() if p.name.isdigit())


class Stub:
    """An implementation: the reference kernels, except where ``kernels`` says otherwise."""

    name = "stub"

    def __init__(self, **kernels):
        self.kernels = kernels

    def kernel(self, fn, op):
        if fn.name in self.kernels:
            return self.kernels[fn.name]
        return fn.reference


def _outcomes(data, function, impl):
    target = ImplTarget(impl)
    return [run_case(p, target) for p in _cases(data, function)]


def test_reference_implementation_passes_every_case(data_dir):
    target = ImplTarget(Stub())
    results = [run_case(p, target) for f in sorted(x.name for x in data_dir.iterdir()) for p in _cases(data_dir, f)]
    assert len(results) > 80
    assert {r.outcome for r in results} == {"PASS"}, [r for r in results if r.outcome != "PASS"][:3]
    assert {r.function for r in results} >= {"diopiMul", "diopiSiluBackward", "diopiLayerNorm", "diopiCat",
                                             "diopiNormal", "diopiBernoulli"}


def test_cpu_device_passes_every_case(data_dir):
    target = make_target(device="cpu")
    results = [run_case(p, target) for f in ("diopiMul", "diopiAdd", "diopiCat", "diopiSiluBackward", "diopiNormal")
               for p in _cases(data_dir, f)]
    assert {r.outcome for r in results} == {"PASS"}


def test_missing_kernel_and_unsupported_dtype_are_not_implemented_and_a_raise_is_a_fail(data_dir):
    results = _outcomes(data_dir, "diopiSilu", Stub(diopiSilu=None))
    assert {r.outcome for r in results} == {"NOT_IMPLEMENTED"}
    assert "stub has no kernel for diopiSilu" in results[0].detail

    def no_half(op, *args, **kwargs):
        if args[0].dtype == torch.float16:
            raise UnsupportedDtypeError("stub: no float16")
        return op(*args, **kwargs)

    results = _outcomes(data_dir, "diopiSilu", Stub(diopiSilu=no_half))
    assert {(r.dtype, r.outcome) for r in results} == {("float32", "PASS"), ("float16", "NOT_IMPLEMENTED")}

    def broken(op, *args, **kwargs):
        raise RuntimeError("stub: kernel crashed")

    results = _outcomes(data_dir, "diopiSilu", Stub(diopiSilu=broken))
    assert {r.outcome for r in results} == {"FAIL"}
    assert results[0].detail == "raised RuntimeError: stub: kernel crashed"


def test_wrong_values_wrong_inplace_write_and_input_mutation_fail(data_dir):
    results = _outcomes(data_dir, "diopiMul", Stub(diopiMul=lambda op, *a, **k: op(*a, **k) + 1))
    by_inplace = {r.op: r.outcome for r in results}
    assert by_inplace["aten.mul.Tensor"] == "FAIL"

    def lost_write(op, *args, **kwargs):  # in place: the result is right, but self is not written
        return op._op(args[0].clone(), *args[1:], **kwargs) if op is torch.ops.aten.mul_.Tensor else op(*args)

    results = _outcomes(data_dir, "diopiMul", Stub(diopiMul=lost_write))
    failed = {r.op for r in results if r.outcome == "FAIL"}
    assert failed == {"aten.mul_.Tensor"}
    assert any("written args[0]" in r.detail for r in results if r.outcome == "FAIL")

    def scribbles(op, *args, **kwargs):
        out = op(*args, **kwargs)
        args[0].zero_()
        return out

    results = _outcomes(data_dir, "diopiSilu", Stub(diopiSilu=scribbles))
    assert {r.outcome for r in results} == {"FAIL"}
    assert "input i0 changed by the call" in results[0].detail


def test_random_functions_are_judged_by_statistics_and_seed_reproducibility(data_dir):
    results = _outcomes(data_dir, "diopiNormal", Stub(diopiNormal=lambda op, x, mean, std: x.normal_(mean + 0.5, std)))
    assert {r.outcome for r in results} == {"FAIL"} and "sample mean" in results[0].detail
    counter = itertools.count(1)

    def unseeded(op, x, mean, std):
        return x.normal_(mean, std, generator=torch.Generator().manual_seed(next(counter)))

    results = _outcomes(data_dir, "diopiNormal", Stub(diopiNormal=unseeded))
    assert {r.outcome for r in results} == {"FAIL"} and "not reproducible" in results[0].detail
    results = _outcomes(data_dir, "diopiBernoulli", Stub(diopiBernoulli=lambda op, p: torch.ones_like(p)))
    assert {r.outcome for r in results} == {"FAIL"} and "ratio of ones 1" in results[0].detail


def test_droplet_fault_on_a_backward_function_fails_exactly_its_cases(data_dir):
    target = make_target(impl="droplet", options={"faults": "silu_backward:bias"})
    results = [run_case(p, target) for f in ("diopiSilu", "diopiSiluBackward") for p in _cases(data_dir, f)]
    assert {(r.function, r.outcome) for r in results} == {("diopiSilu", "PASS"), ("diopiSiluBackward", "FAIL")}


def test_statistical_checks_accept_good_samples_and_name_what_is_wrong():
    from diopi.conformance.stats import check_random

    g = torch.Generator().manual_seed(0)
    normal = torch.randn(4000, generator=g) * 0.5 + 2
    assert check_random({"kind": "moments", "mean": "param:m", "std": 0.5}, {"m": 2.0}, [], normal) is None
    assert "standard deviation" in check_random({"kind": "moments", "mean": 2.0, "std": 1.0}, {}, [], normal)
    uniform = torch.rand(1000, generator=g) * 4 - 1
    assert check_random({"kind": "range", "low": -1.0, "high": 3.0}, {}, [], uniform) is None
    assert "at or above the range high 2" in check_random({"kind": "range", "low": -1, "high": 2}, {}, [], uniform)
    perm = torch.randperm(50, generator=g)
    assert check_random({"kind": "permutation"}, {}, [], perm) is None
    assert check_random({"kind": "permutation"}, {}, [], perm.clamp(max=48)) == "not a permutation of range(50)"
    x = torch.randn(100, 40, generator=g)
    mask = torch.rand(100, 40, generator=g) >= 0.3
    out = torch.where(mask, x / 0.7, 0.0)
    assert check_random({"kind": "dropout"}, {"p": 0.3}, [x], (out, mask)) is None
    assert "drop ratio" in check_random({"kind": "dropout"}, {"p": 0.6}, [x], (torch.where(mask, x / 0.4, 0.0), mask))
    assert "scaled by 1/(1-p)" in check_random({"kind": "dropout"}, {"p": 0.3}, [x], (torch.where(mask, x, 0.0), mask))
    weights = torch.tensor([[1.0, 0.0, 2.0, 1.0], [0.5, 0.5, 0.0, 1.0]])
    assert check_random({"kind": "categorical"}, {"replacement": False}, [weights],
                        torch.tensor([[0, 2, 3], [3, 0, 1]])) is None
    assert check_random({"kind": "categorical"}, {"replacement": False}, [weights],
                        torch.tensor([[0, 2, 2], [3, 0, 1]])) == "an index drawn twice without replacement"
    assert check_random({"kind": "categorical"}, {}, [weights],
                        torch.tensor([[1, 2, 3], [3, 0, 1]])) == "a category of zero probability was drawn"


def test_a_device_run_proves_each_function_reached_the_devices_kernel(data_dir, run_cli, tmp_path):
    import csv

    import torch_dipu

    table = tmp_path / "run.csv"
    status, out, _ = run_cli("run", "--device", "dipu", "--data", str(data_dir), "--csv", str(table),
                             "--functions", "diopiMul,diopiSilu,diopiSiluBackward")
    assert status == 0, out
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["reached"] for r in rows} == {"yes"}
    torch_dipu.set_force_fallback("mul|mul_")  # the CPU computes it: right values, but the vendor never ran
    try:
        status, out, _ = run_cli("run", "--device", "dipu", "--data", str(data_dir), "--csv", str(table),
                                 "--functions", "diopiMul,diopiSilu")
    finally:
        torch_dipu.set_force_fallback("")
    assert status == 1
    assert "UNREACHED diopiMul: none of its cases ran the device's kernel" in out
    assert "UNREACHED diopiSilu" not in out
    with open(table, newline="") as f:
        reached = {(r["function"], r["reached"]) for r in csv.DictReader(f)}
    assert reached == {("diopiMul", "no"), ("diopiSilu", "yes")}


def test_count_reports_the_functions_that_reach_the_devices_kernels(capsys):
    import torch_dipu
    from diopi.conformance import cli

    assert cli.main(["count", "--device", "dipu"]) == 0
    out = capsys.readouterr().out
    total = int(out.split(" functions,", 1)[0])
    assert total >= 300 and f"{total} of {total} functions reach dipu's kernels" in out
    torch_dipu.set_force_fallback("mul|mul_")
    try:
        assert cli.main(["count", "--device", "dipu", "--functions", "diopiMul,diopiAdd"]) == 0
    finally:
        torch_dipu.set_force_fallback("")
    out = capsys.readouterr().out
    assert "1 of 2 functions reach dipu's kernels" in out
    assert "unreachable on dipu: diopiMul: forced to the CPU by DIPU_FORCE_FALLBACK_OPS_LIST" in out
    assert cli.main(["count", "--device", "cpu", "--functions", "diopiAdd"]) == 0
    assert "cannot tell which functions reach its kernels" in capsys.readouterr().out
