"""Every gradient contribution counts: an input reached by several autograd nodes (or edges) of one call gets the
sum of them in every backward mode, so a NaN arriving through the second contribution is found and the
recorded statistics are those of the full gradient (issue 14, "silently dropped findings").

``F.linear(a, x, x)`` with 2-D ``a`` runs ``addmm(x, a, x.t())``: it creates two nodes, ``TBackward0`` and
``AddmmBackward0``. ``x`` is reached by both: as ``addmm``'s ``self`` (the output gradient itself, no kernel)
through ``AddmmBackward0``, which runs first, and as the weight through ``TBackward0``, whose gradient comes
from ``addmm``'s ``mm`` kernel. Under droplet's ``mm:nan`` fault only that second contribution has a NaN.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools.overflow import OpOverflowCheck
from op_tools.tensor_stats import tensor_stats
from torch_dipu import claims
from torch_dipu.vendors.droplet import switches


@pytest.fixture(autouse=True)
def _linear_decomposed():
    """These tests are about a call whose decomposition creates two nodes; torch_dipu claims ``linear`` as one
    kernel (docs/torch_dipu.md), so they run with PyTorch's decomposition."""
    with claims.suspended():
        yield


def _leaf() -> torch.Tensor:
    return torch.tensor([[1.0, -2.0], [3.0, 0.5]], device="dipu", requires_grad=True)


def _a() -> torch.Tensor:
    return torch.tensor([[2.0, 1.0], [-1.0, 4.0]], device="dipu")  # no gradient: only x's gradient is judged


def _grad_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "backward"]


def _assert_stats_equal(recorded: dict, expected: dict) -> None:
    assert recorded["nan"] == expected["nan"] and recorded["inf"] == expected["inf"]
    assert recorded["numel"] == expected["numel"]
    for key in ("min", "max", "mean", "std", "norm"):
        assert recorded[key] == pytest.approx(expected[key]), key


def test_the_call_creates_two_nodes_that_reach_the_same_input() -> None:
    x = _leaf()
    y = F.linear(_a(), x, x)
    addmm = y.grad_fn
    assert type(addmm).__name__ == "AddmmBackward0"
    (self_fn, _), (mat1_fn, _), (mat2_fn, _) = addmm.next_functions
    assert type(self_fn).__name__ == "AccumulateGrad" and mat1_fn is None
    assert type(mat2_fn).__name__ == "TBackward0" and mat2_fn.next_functions[0][0] is self_fn
    with switches(faults="mm:nan"):
        y.sum().backward()
    assert x.grad is not None and int(torch.isnan(x.grad.cpu()).sum()) == 1  # from the second contribution only


def test_overflow_check_finds_a_nan_that_arrives_through_the_second_node(tmp_path: Path) -> None:
    x = _leaf()
    with OpOverflowCheck(results_dir=tmp_path, run_id="n", device="dipu") as tool:
        y = F.linear(_a(), x, x)
        with switches(faults="mm:nan"):
            y.sum().backward()
    assert tool.flagged == 0 and tool.checked_backward >= 1
    assert tool.flagged_backward == 1
    rows = [r for r in tool.results if r["phase"] == "backward"]
    assert [(r["name"], r["index"]) for r in rows] == [("torch.nn.functional.linear", "grad_input[1]")]
    row = rows[0]
    assert row["nan"] == 1 and row["inf"] == 0 and row["shape"] == [2, 2] and row["dtype"] == "float32"
    finite = x.grad.cpu()[torch.isfinite(x.grad.cpu())]
    assert row["min"] == pytest.approx(float(finite.min())) and row["max"] == pytest.approx(float(finite.max()))


def test_overflow_check_sums_the_contributions_of_one_node_s_edges(tmp_path: Path) -> None:
    """``addmm(x, x, x)``: one node, three edges to ``x``; the first (``self``) is finite, the ``mm`` ones not."""
    x = _leaf()
    with OpOverflowCheck(results_dir=tmp_path, run_id="e", device="dipu") as tool:
        y = torch.addmm(x, x, x)
        with switches(faults="mm:nan"):
            y.sum().backward()
    assert tool.flagged_backward == 1
    (row,) = [r for r in tool.results if r["phase"] == "backward"]
    assert row["name"] == "torch.addmm" and row["index"] == "grad_input[0]" and row["nan"] == 1


@pytest.mark.parametrize("fault", ["", "mm:nan"])
def test_stats_capture_records_the_statistics_of_the_summed_gradient(tmp_path: Path, fault: str) -> None:
    x = _leaf()
    with op_tools.OpCapture(results_dir=tmp_path, run_id=f"s{len(fault)}", device="dipu", mode="stats") as cap:
        y = F.linear(_a(), x, x)
        with switches(faults=fault):
            y.sum().backward()
    (row,) = [r for r in _grad_rows(cap.run_dir) if r["op"] == "torch.nn.functional.linear"]
    full = x.grad.cpu()
    recorded = row["tensors"]["gi1"]  # x is the call's second input
    assert recorded["shape"] == [2, 2] and recorded["dtype"] == "float32"
    _assert_stats_equal(recorded, tensor_stats(full))
    if not fault:  # the first contribution alone (all ones) would give min == max == 1
        assert full.tolist() == [[2.0, 6.0], [2.0, 6.0]] and recorded["min"] == 2.0 and recorded["max"] == 6.0
        assert recorded["mean"] == pytest.approx(4.0) and recorded["norm"] == pytest.approx(math.sqrt(80.0))
    else:
        assert recorded["nan"] == 1


def test_data_capture_and_overflow_check_together_see_the_summed_gradient(tmp_path: Path) -> None:
    """The strongest need (host copies) serves both tools; the copies are the sum of the contributions."""
    x = _leaf()
    seen: list[dict[int, torch.Tensor]] = []

    class Spy(op_tools.OpCapture):
        def on_backward(self, call, state, grad_inputs, grad_outputs):  # noqa: ANN001, ANN202
            if call.name == "torch.nn.functional.linear":
                seen.append(dict(grad_inputs))
            super().on_backward(call, state, grad_inputs, grad_outputs)

    with Spy(results_dir=tmp_path, run_id="d", device="dipu"), \
            OpOverflowCheck(results_dir=tmp_path, run_id="d2", device="dipu") as tool:
        y = F.linear(_a(), x, x)
        y.sum().backward()
    assert tool.flagged_backward == 0
    (grads,) = seen
    assert sorted(grads) == [1] and grads[1].device.type == "cpu"
    assert grads[1].tolist() == x.grad.cpu().tolist() == [[2.0, 6.0], [2.0, 6.0]]  # ones + column sums of a


def test_contributions_of_nodes_that_never_run_are_not_waited_for(tmp_path: Path) -> None:
    """``meshgrid(x, x)`` reaches ``x`` through both outputs' nodes; with only the first output used, the
    second one's nodes never run and ``x``'s gradient is the first contribution, delivered at the end."""
    x = torch.tensor([1.0, -2.0, 3.0], device="dipu", requires_grad=True)
    w = torch.tensor([[1.0], [2.0], [3.0]], device="dipu")
    with op_tools.OpCapture(results_dir=tmp_path, run_id="m", device="dipu", mode="stats") as cap:
        g0, _ = torch.meshgrid(x, x, indexing="ij")
        (g0 * w).sum().backward()
    assert x.grad.cpu().tolist() == [3.0, 6.0, 9.0]
    (row,) = [r for r in _grad_rows(cap.run_dir) if r["op"] == "torch.meshgrid"]
    assert sorted(row["tensors"]) == ["gi0", "go0"]
    _assert_stats_equal(row["tensors"]["gi0"], tensor_stats(x.grad.cpu()))
