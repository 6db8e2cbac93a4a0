"""Replay timing (issue 6): ``--sync_time_measure --run_times N`` prints every run's forward and backward
time, marks the first run as including warm-up, then min/median/max per case; a delay injected into the
ATen op with droplet's ``slow`` fault shows up in the forward time."""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

import pytest
import torch

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import run_op_from_data
from op_tools.replay import run_stats

OP = "torch.nn.functional.linear"
DELAY_MS = 5.0


def _capture(tmp_path: Path) -> Path:
    x = torch.randn(8, 16, device="dipu", requires_grad=True)
    w = torch.randn(4, 16, device="dipu", requires_grad=True)
    with op_tools.OpCapture(results_dir=tmp_path / "cap", run_id="t", ops=OP) as cap:
        torch.nn.functional.linear(x, w).sum().backward()
    return cap.run_dir


def _replay(capsys: pytest.CaptureFixture, run_dir: Path, results: Path, *extra: str) -> str:
    parser = argparse.ArgumentParser()
    run_op_from_data.add_arguments(parser)
    args = parser.parse_args([str(run_dir), "--sync_time_measure", "--results_dir", str(results), *extra])
    capsys.readouterr()
    assert run_op_from_data.run(args) == 0
    return capsys.readouterr().err


def _run_times(err: str, phase: str) -> list[float]:
    pattern = rf"^SyncExecuteTimer: {re.escape(OP)} {phase} elapsed ([0-9.]+) ms \(run (\d+) of (\d+)"
    found = [(float(m.group(1)), int(m.group(2))) for m in re.finditer(pattern, err, re.MULTILINE)]
    assert [n for _, n in found] == list(range(1, len(found) + 1))
    return [ms for ms, _ in found]


def test_run_stats_leave_out_the_warm_up_run() -> None:
    assert run_stats([]) is None
    assert run_stats([7.0]) == {"min": 7.0, "median": 7.0, "max": 7.0, "runs": 1, "warmup_excluded": False}
    stats = run_stats([90.0, 1.0, 3.0, 2.0])
    assert stats == {"min": 1.0, "median": 2.0, "max": 3.0, "runs": 3, "warmup_excluded": True}


def test_slow_fault_shows_in_the_replayed_forward_time(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from torch_dipu.vendors.droplet import switches

    run_dir = _capture(tmp_path)
    # A sleep never wakes early: every faulty run takes at least the injected delay, and more than the same op
    # replayed without the fault in this run (milliseconds apart, whatever the machine's speed).
    normal_err = _replay(capsys, run_dir, tmp_path / "normal", "--run_times", "5")
    normal = statistics.median(_run_times(normal_err, "forward")[1:])
    with switches(faults=f"linear|mm:slow:{DELAY_MS:g}"):
        err = _replay(capsys, run_dir, tmp_path / "faulty", "--run_times", "3")
    forward = _run_times(err, "forward")
    assert len(forward) == 3 and len(_run_times(err, "backward")) == 3
    assert all(ms >= DELAY_MS for ms in forward) and min(forward[1:]) > normal, (forward, normal)
    assert "(run 1 of 3, includes warm-up)" in err and "(run 2 of 3)" in err
    for phase in ("forward", "backward"):
        line = re.search(rf"^SyncExecuteTimer: {re.escape(OP)} {phase} min ([0-9.]+) median ([0-9.]+) "
                         rf"max ([0-9.]+) ms \(runs 2-3, run 1 \(warm-up\) left out\)$", err, re.MULTILINE)
        assert line, err
        low, mid, high = map(float, line.groups())
        assert low <= mid <= high
        if phase == "forward":
            assert mid >= DELAY_MS


def test_forward_only_single_run_prints_its_stats(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = _capture(tmp_path)
    err = _replay(capsys, run_dir, tmp_path / "r", "--only_run_forward")
    assert len(_run_times(err, "forward")) == 1 and "backward" not in err.split("replay summary")[0]
    assert re.search(rf"SyncExecuteTimer: {re.escape(OP)} forward min [0-9.]+ median [0-9.]+ max [0-9.]+ ms "
                     r"\(1 run, includes warm-up\)", err)
