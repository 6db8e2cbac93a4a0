"""The acceptance workload: capture the W1 training step, replay every case bitwise; tools do not change
the losses of 20 steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools.replay import find_cases, replay_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402

pytest.importorskip("transformers")


@pytest.mark.parametrize("device", ["dipu", "cpu"])
def test_w1_capture_replays_bitwise(tmp_path: Path, device: str) -> None:
    step = w1_step(device)
    step()  # optimizer state exists: the captured step is a steady-state one
    with op_tools.OpCapture(results_dir=tmp_path, run_id="w1", device=device) as cap:
        step()
    cases = find_cases(cap.run_dir)
    assert len(cases) == cap.captured == cap.cases_written
    assert cap.captured > 150 and cap.backward_cases > 100
    ops = {path.parent.name for path in cases}
    assert {"torch.nn.functional.linear", "torch.nn.functional.scaled_dot_product_attention",
            "torch.nn.functional.cross_entropy"} <= ops
    # AdamW uses foreach kernels on dipu, its per-tensor loop on the CPU.
    assert ("torch._foreach_addcdiv_" in ops) == (device == "dipu")
    results = list(replay_dir(cap.run_dir))
    problems = [(r.path, r.status, r.message) for r in results
                if r.status != "PASS" or r.bitwise_forward is False or r.bitwise_backward is False]
    assert problems == []
    with_backward = [r for r in results if r.bitwise_backward is not None]
    assert len(with_backward) == cap.backward_cases
    assert all(r.bitwise_forward for r in results if r.forward != "SKIP (random)")


def run_losses(tool_factory, steps: int = 20) -> list[float]:
    step = w1_step("dipu")
    tool = tool_factory()
    if tool is None:
        return [step() for _ in range(steps)]
    with tool:
        return [step() for _ in range(steps)]


def test_tools_leave_20_w1_steps_bitwise_unchanged(tmp_path: Path) -> None:
    plain = run_losses(lambda: None)
    assert len(set(plain)) > 1  # it trains
    observed = run_losses(lambda: op_tools.OpObserve(file=tmp_path / "observe.log"))
    statistics = run_losses(lambda: op_tools.OpCapture(results_dir=tmp_path / "stats", mode="stats"))
    # The optimizer's foreach calls hold most of the bytes (about 70 MiB a step); leave them out to keep the
    # test's disk use small. Every other call of all 20 steps is captured with its gradients.
    captured = run_losses(lambda: op_tools.OpCapture(results_dir=tmp_path / "data", disable_ops=r"torch\._foreach.*"))
    assert observed == plain
    assert statistics == plain
    assert captured == plain
    assert (tmp_path / "observe.log").read_text().count("\n") > 20 * 150
