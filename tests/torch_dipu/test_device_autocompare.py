"""DIPU_AUTOCOMPARE_OPS_LIST: ops reaching the device are re-run on the CPU and judged, forward and backward.

Faults of the droplet vendor prove that the comparison finds what it claims; clean W1 steps prove that it
reports nothing where nothing is wrong and leaves training bitwise unchanged.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_dipu
from diopi.result_table import read_rows
from torch_dipu import device_autocompare, dispatch
from torch_dipu.tensor import _HANDLERS
from torch_dipu.vendors import droplet

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402


@pytest.fixture
def autocompare(tmp_path: Path):
    """``autocompare(entries)`` switches the list on, writing under ``tmp_path``; off after the test."""

    def switch(entries: str) -> None:
        torch_dipu.set_autocompare_ops(entries, results_dir=tmp_path, run_id="run")

    yield switch
    torch_dipu.set_autocompare_ops("")


def _fails(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["verdict"] == "FAIL"]


def test_a_forward_fault_is_not_close_and_the_result_is_the_devices(autocompare, tmp_path, capsys) -> None:
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    autocompare("mm")
    with droplet.switches(faults="mm:bias:0.5"):
        c = a.dipu() @ b.dipu()
    assert torch.equal(c.cpu(), a @ b + 0.5)  # what the faulty device gave, unchanged
    (row,) = device_autocompare.results()
    assert (row["name"], row["phase"], row["verdict"], row["index"]) == ("mm", "forward", "FAIL", "out")
    assert row["max_abs_diff"] == pytest.approx(0.5) and row["function"] == "diopiMm"
    assert read_rows(tmp_path / "dipu_autocompare" / "run" / "rank0") == [row]
    header = (tmp_path / "dipu_autocompare" / "run" / "rank0" / "results.csv").read_text().splitlines()[0]
    assert header.startswith("id,name,phase,verdict,index,max_abs_diff")
    out = capsys.readouterr().out
    assert "autocompare:\tmm forward: not_close max_abs_diff=0.5 " in out and "at out (FAIL" in out
    a.dipu() @ b.dipu()  # no fault: allclose
    assert "autocompare:\tmm forward: allclose\n" in capsys.readouterr().out
    assert device_autocompare.summary().startswith("dipu autocompare: 2 ops compared: 1 allclose, 1 not_close;")


@pytest.mark.parametrize("fault, op", [("mm:grad:3", "mm"), ("threshold_backward:bias:1", "threshold_backward")])
def test_a_fault_seen_only_in_backward_is_reported_in_phase_backward(autocompare, capsys, fault, op) -> None:
    autocompare(op)
    x, w = torch.randn(4, 3).dipu(), torch.randn(3, 5).dipu().requires_grad_()
    with droplet.switches(faults=fault):
        torch.relu(x @ w).sum().backward()
    rows = device_autocompare.results()
    assert {(r["name"], r["phase"]) for r in _fails(rows)} == {(op, "backward")}
    assert all(r["verdict"] == "PASS" for r in rows if r["phase"] == "forward")
    assert f"autocompare:\t{op} backward: not_close" in capsys.readouterr().out


def test_a_lost_inplace_write_is_caught(autocompare) -> None:
    autocompare("add_.Tensor")
    x = torch.ones(3).dipu()
    with droplet.switches(faults="add_.Tensor:inplace_lost"):
        x.add_(2)
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]
    (row,) = device_autocompare.results()
    assert (row["verdict"], row["index"], row["max_abs_diff"]) == ("FAIL", "self", 2.0)


def test_running_statistics_are_compared_as_written_arguments(autocompare) -> None:
    autocompare("native_batch_norm")
    bn = torch.nn.BatchNorm1d(4).dipu()
    bn(torch.randn(8, 4).dipu())  # training: updates running_mean and running_var in place
    rows = device_autocompare.results()
    assert {r["index"]: r["verdict"] for r in rows} == {
        "out[0]": "PASS", "out[1]": "PASS", "out[2]": "PASS", "running_mean": "PASS", "running_var": "PASS"}
    assert bn.running_mean.abs().sum().item() > 0


def test_a_noncontiguous_input_stays_noncontiguous_on_the_cpu(autocompare) -> None:
    autocompare("mul.Tensor")
    a, b = torch.randn(4, 6), torch.randn(6, 4)
    with droplet.switches(faults="mul.Tensor:noncontig"):
        a.dipu() * b.dipu().t()  # wrong on the transposed input
        a.dipu() * b.t().contiguous().dipu()  # right on a contiguous one
    assert [r["verdict"] for r in device_autocompare.results()] == ["FAIL", "PASS"]


def test_an_input_the_kernel_writes_is_reported_modified(autocompare, capsys) -> None:
    def corrupting(handler, func, plan):  # a faulty kernel: writes into its second (read-only) input
        if func is not torch.ops.aten.sub.Tensor:
            return handler

        def run(args, kwargs):
            out = handler(args, kwargs)
            args[1]._raw.add_(1)
            return out

        return run

    autocompare("sub.Tensor")
    dispatch.set_handler_wrapper("count", corrupting)  # innermost: runs inside the comparison's wrapper
    try:
        a, b = torch.ones(3).dipu(), torch.ones(3).dipu()
        assert (a - b).cpu().tolist() == [0.0, 0.0, 0.0]
    finally:
        dispatch.set_handler_wrapper("count", None)
    rows = device_autocompare.results()
    assert [(r["index"], r["verdict"]) for r in rows] == [("input other", "FAIL"), ("out", "PASS")]
    assert "autocompare:\tsub.Tensor forward: input other modified" in capsys.readouterr().out


def test_random_ops_are_skip_rows(autocompare) -> None:
    autocompare("native_dropout|_scaled_dot_product_flash_attention_for_cpu")
    x = torch.randn(2, 2, 8, 4).dipu()
    F.dropout(x, 0.5, training=True)
    F.scaled_dot_product_attention(x, x, x)  # dropout_p == 0: draws nothing, compared
    rows = device_autocompare.results()
    assert [(r["name"], r["verdict"]) for r in rows] == [
        ("native_dropout", "SKIP"), ("_scaled_dot_product_flash_attention_for_cpu", "PASS"),
        ("_scaled_dot_product_flash_attention_for_cpu", "PASS")]  # its outputs: attention and logsumexp
    assert "random" in rows[0]["message"]


def test_an_empty_list_costs_nothing_and_a_bad_entry_names_the_variable(autocompare) -> None:
    autocompare("mm")
    assert "autocompare" in dispatch.handler_wrappers
    torch_dipu.set_autocompare_ops("")
    assert "autocompare" not in dispatch.handler_wrappers
    torch.ones(2).dipu() + 1
    assert dispatch.plain_handler(_HANDLERS[id(torch.ops.aten.add.Tensor)]).__name__ == "handler"
    with pytest.raises(ValueError, match=r"DIPU_AUTOCOMPARE_OPS_LIST: entry 'mm\(' is not a valid regular"):
        torch_dipu.set_autocompare_ops("add.Tensor, mm(")


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_clean_w1_steps_report_nothing_and_train_bitwise_alike(autocompare, autocast) -> None:
    def losses() -> list[float]:
        step = w1_step("dipu")
        out = []
        for _ in range(2):
            with torch.autocast("dipu", dtype=torch.bfloat16, enabled=autocast):
                out.append(step())
        return out

    plain = losses()
    autocompare(".*")
    compared = losses()
    assert compared == plain
    rows = device_autocompare.results()
    counts = Counter(r["verdict"] for r in rows)
    assert counts["FAIL"] == 0 and counts["PASS"] > 500, counts
    phases = Counter(r["phase"] for r in rows)
    assert phases["forward"] and phases["backward"]
    names = {r["name"] for r in rows}
    assert {"mm", "linear", "_scaled_dot_product_flash_attention_for_cpu_backward"} <= names


def test_the_config_file_is_read_and_a_summary_printed_at_exit(run_python, tmp_path) -> None:
    (tmp_path / ".specified_autocompare_op_list.config").write_text("aten.mm\n")
    proc = run_python(
        """
        import torch, torch_dipu
        torch.ones(2, 3, device="dipu") @ torch.ones(3, 2, device="dipu")
        """,
        env={"DROPLET_FAULTS": "mm:bias:1", "OP_TOOLS_RESULTS_DIR": str(tmp_path / "res"), "OP_TOOLS_RUN_ID": "r"},
        cwd=tmp_path,
    )
    run_dir = tmp_path / "res" / "dipu_autocompare" / "r" / "rank0"
    assert "autocompare:\tmm forward: not_close max_abs_diff=1 " in proc.stdout
    assert f"dipu autocompare: 1 ops compared: 0 allclose, 1 not_close; results in {run_dir}" in proc.stdout
    assert [r["verdict"] for r in read_rows(run_dir)] == ["FAIL"]
    bad = run_python("import torch_dipu", env={"DIPU_AUTOCOMPARE_OPS_LIST": "mm,add["}, check=False)
    assert bad.returncode != 0 and "DIPU_AUTOCOMPARE_OPS_LIST: entry 'add['" in bad.stderr
