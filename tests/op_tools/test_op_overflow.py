"""OpOverflowCheck: the op that produces NaN/Inf is flagged, ops that pass it on are not; droplet faults are
found at the op calling the faulted kernel, forward and backward; clean runs flag nothing and keep losses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools.overflow import OpOverflowCheck
from torch_dipu.vendors.droplet import switches

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402


def flagged(tool: OpOverflowCheck) -> list[tuple[str, str, str]]:
    return [(r["name"], r["phase"], r["index"]) for r in tool.results]


def test_the_producer_is_flagged_and_propagating_ops_are_not(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    x = torch.rand(4, 5, device="dipu") + 0.5
    with OpOverflowCheck(results_dir=tmp_path, run_id="r", device="dipu") as tool:
        a = x * 2  # finite
        b = torch.log(-a)  # the producer: 20 NaN
        c = b + 1  # passes the NaN on
        d = c.exp().sum()  # passes it on
        e = x / 0  # a second producer: 20 Inf
        f = e - e  # NaN from Inf: explained by its inputs
    assert torch.isnan(d) and torch.isnan(f).all()
    assert flagged(tool) == [("torch.log", "forward", "out[0]"), ("torch.Tensor.div", "forward", "out[0]")]
    log_row, div_row = tool.results
    assert log_row["verdict"] == "FAIL" and log_row["nan"] == 20 and log_row["inf"] == 0
    assert log_row["dtype"] == "float32" and log_row["shape"] == [4, 5] and log_row["step"] >= 1
    assert "torch.log(-a)" in log_row["call_site"] and "20 NaN, 0 Inf" in log_row["message"]
    assert div_row["inf"] == 20 and div_row["nan"] == 0 and div_row["id"] > log_row["id"]
    assert tool.checked == 8 and tool.flagged == 2 and tool.flagged_backward == 0  # mul neg log add exp sum div sub
    assert (tool.run_dir / "results.csv").read_text().count("\n") == 3
    err = capsys.readouterr().err
    step = log_row["step"]
    assert (f"OpOverflowCheck: step {step}: torch.log: 1 FAIL (worst: #{log_row['id']} forward out[0]: 20 NaN, "
            f"0 Inf (inputs finite) at ") in err
    assert err.count(f"OpOverflowCheck: step {step}: torch.") == 2  # one line per flagged op, none for propagating
    summary = err[err.index("first producer"):]
    assert summary.startswith(f"first producer: torch.log #{log_row['id']} forward")
    assert summary.index("torch.log forward x1") < summary.index("torch.Tensor.div forward x1")


def test_inf_from_an_input_with_nan_is_produced_and_inplace_inputs_are_judged_before(tmp_path: Path) -> None:
    x = torch.tensor([1.0, float("nan"), 1000.0], device="dipu")
    y = torch.tensor([1.0, float("inf"), 2.0], device="dipu")
    with OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        x.exp()  # Inf from 1000 (its NaN does not explain Inf)
        x.exp_()  # in place: the same, judged on the input before the call
        y.mul_(0)  # NaN from Inf * 0: explained by the Inf the input had before
        z = torch.zeros(3, device="dipu")
        torch.div(z, z, out=torch.empty(3, device="dipu"))  # 0/0; the out= buffer is not an input
    rows = tool.results
    assert [(r["name"], r["nan"], r["inf"]) for r in rows] == [
        ("torch.Tensor.exp", 1, 1), ("torch.Tensor.exp_", 1, 1), ("torch.div", 3, 0)]


def test_backward_producer_is_flagged_in_phase_backward(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("dipu")
    x = torch.randn(8, 16, device="dipu")
    with OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        loss = model(x).square().mean()
        with switches(faults="mm:nan"):  # only the backward's matmuls are faulty
            loss.backward()
    assert torch.isfinite(loss) and tool.flagged == 0 and tool.checked_backward >= 5
    rows = tool.results
    assert [(r["name"], r["phase"]) for r in rows] == [("torch.nn.functional.linear", "backward")] * len(rows)
    # Backward runs the second linear first: its input and weight gradients (two matmuls) get the NaN. ReLU
    # passes it on or masks it; the first linear's own weight-gradient matmul makes a new one either way.
    second, first = sorted({r["id"] for r in rows}, reverse=True)
    assert rows[0]["id"] == second and tool.first is not None and f"linear #{second} backward" in tool.first
    assert [r["index"] for r in rows if r["id"] == second] == ["grad_input[0]", "grad_input[1]"]
    assert "grad_input[1]" in [r["index"] for r in rows if r["id"] == first] and tool.flagged_backward == 2
    assert all("model(x)" in r["call_site"] for r in rows)


@pytest.fixture(scope="module")
def clean_w1(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], list[float], OpOverflowCheck]:
    step = w1_step("dipu")
    plain = [step() for _ in range(3)]
    step = w1_step("dipu")
    tool = OpOverflowCheck(device="dipu", results_dir=tmp_path_factory.mktemp("clean"))
    with tool:
        checked = [step() for _ in range(3)]
    return plain, checked, tool


def test_clean_w1_steps_flag_nothing_and_keep_losses_bitwise(clean_w1) -> None:
    plain, checked, tool = clean_w1
    assert checked == plain and len(set(plain)) > 1
    assert tool.checked > 400 and tool.checked_backward > 300
    assert tool.flagged == tool.flagged_backward == 0 and tool.results == [] and tool.first is None
    assert not tool.run_dir.exists()  # nothing flagged, nothing written


@pytest.mark.parametrize(("fault", "name", "phase"), [
    ("linear:nan", "torch.nn.functional.linear", "forward"),
    ("nll_loss_backward:nan", "torch.nn.functional.cross_entropy", "backward"),
    (".*_backward:nan", "torch.nn.functional.cross_entropy", "backward"),
])
def test_droplet_nan_fault_is_found_at_the_op_calling_the_kernel(tmp_path: Path, fault: str, name: str,
                                                                 phase: str) -> None:
    step = w1_step("dipu")
    step()
    with switches(faults=fault), OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        loss = step()
    assert (loss != loss) == (phase == "forward")  # noqa: PLR0124 (NaN: the loss is computed before the backward)
    first = tool.results[0]
    assert (first["name"], first["phase"]) == (name, phase)
    assert tool.first is not None and tool.first.startswith(f"OpOverflowCheck: {name} #{first['id']} {phase}")
    if phase == "forward":  # q_proj: the first linear of the model; k_proj and v_proj read finite inputs too
        assert "q_proj" in first["call_site"] and tool.flagged == 3 and tool.flagged_backward == 0
    else:  # everything after the faulted backward kernel has NaN output gradients
        assert tool.flagged == 0 and tool.flagged_backward == 1 and first["index"] == "grad_input[0]"


def test_lists_steps_and_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OVERFLOW_CHECK_DISABLE_LIST", "torch.log")
    x = torch.ones(3, device="dipu")
    with op_tools.OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        torch.log(-x)
        torch.sqrt(-x)
    assert flagged(tool) == [("torch.sqrt", "forward", "out[0]")]
    monkeypatch.delenv("OP_OVERFLOW_CHECK_DISABLE_LIST")
    monkeypatch.setenv("OP_OVERFLOW_CHECK_STEPS", "1000")
    with OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        torch.log(-x)
    assert tool.checked == 0 and tool.results == []
    from op_tools.features import FEATURES

    assert FEATURES["overflow_check"] is OpOverflowCheck


def test_uninitialized_memory_is_not_a_producer(tmp_path: Path) -> None:
    """``torch.empty`` may return any bit pattern, NaN included: it is never flagged."""
    with OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        for make in (lambda: torch.empty(64, device="dipu"), lambda: torch.empty_like(torch.zeros(64, device="dipu"))):
            for _ in range(20):  # freed memory full of NaN, which the next allocation of its size reuses
                make().fill_(float("nan"))
    assert tool.checked >= 40
    assert {r["name"] for r in tool.results} <= {"torch.Tensor.fill_"}
