"""OpTimeMeasure: a droplet ``slow`` fault on mm is measured where it happens (F.linear, forward and backward),
in both modes; W1's losses are unchanged; LIST filters; pending events stay bounded; collectives of two gloo
processes are timed."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import op_tools
import op_tools.time_measure as time_measure
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools.features import FEATURES
from op_tools.time_measure import OpTimeMeasure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402

LINEAR = "torch.nn.functional.linear"
CALLS = 6


def entry(tool: OpTimeMeasure, name: str, phase: str) -> dict:
    return next(e for e in tool.summary() if e["name"] == name and e["phase"] == phase)


def small_model() -> None:
    """CALLS forward and backward passes of linear -> relu -> sum (the linear's mm is tiny: the fault dominates)."""
    x = torch.randn(8, 16, device="dipu", requires_grad=True)
    w = torch.randn(16, 16, device="dipu", requires_grad=True)
    for _ in range(CALLS):
        F.linear(x, w).relu().sum().backward()


_SLOW_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import torch
    import torch.nn.functional as F
    import torch_dipu
    from op_tools import OpTimeMeasure
    from torch_dipu.vendors.droplet import switches

    modes, results, calls = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    linear = "torch.nn.functional.linear"

    def small_model():
        x = torch.randn(8, 16, device="dipu", requires_grad=True)
        w = torch.randn(16, 16, device="dipu", requires_grad=True)
        for _ in range(calls):
            F.linear(x, w).relu().sum().backward()

    def p50(tool, phase):
        return next(e["p50_ms"] for e in tool.summary() if e["name"] == linear and e["phase"] == phase)

    def measure(mode):
        tries = []
        deadline = time.monotonic() + 8
        for attempt in range(1):  # one try: the checks are lower bounds, which a loaded machine cannot break
            with OpTimeMeasure(mode=mode, device="dipu", results_dir=results,
                               run_id=f"{mode}-plain{attempt}", top=0) as plain:
                small_model()
            with switches(faults="linear|mm:slow:5"), OpTimeMeasure(mode=mode, device="dipu", results_dir=results,
                                                             run_id=f"{mode}-slow{attempt}", top=3) as tool:
                small_model()
            # mm sleeps 5 ms; linear's backward runs mm twice
            errors = {phase: abs(p50(tool, phase) - (delay + p50(plain, phase))) / (delay + p50(plain, phase))
                      for phase, delay in (("forward", 5.0), ("backward", 10.0))}
            tries.append({"errors": errors, "slow": {ph: p50(tool, ph) for ph in errors},
                          "normal": {ph: p50(plain, ph) for ph in errors}})
            if max(errors.values()) <= 0.2 or time.monotonic() > deadline:
                break
        return {"tries": tries, "mode": tool.mode, "summary": tool.summary(), "rows": tool.results,
                "run_dir": str(tool.run_dir)}

    print(json.dumps({mode: measure(mode) for mode in modes}))
""")


def test_a_slow_mm_is_measured_in_linear_forward_and_backward_in_both_modes(tmp_path: Path) -> None:
    # In a process of its own, so the other tests of this worker cannot add to the times.
    script = tmp_path / "slow.py"
    script.write_text(_SLOW_SCRIPT)
    done = subprocess.run([sys.executable, str(script), "event,sync", str(tmp_path), str(CALLS)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": _pythonpath()})
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout.strip().splitlines()[-1])
    for mode in ("event", "sync"):
        check_slow_mm(mode, reports[mode], done.stderr)


def check_slow_mm(mode: str, report: dict, err: str) -> None:
    tries = report["tries"]
    # Per call (medians): a sleep never wakes early, so at least the injected delay (5 ms forward, 2 x 5 ms
    # backward), and more than the same calls without the fault, measured in the same process.
    slow, normal = tries[-1]["slow"], tries[-1]["normal"]
    assert slow["forward"] >= 5.0 and slow["backward"] >= 10.0, tries
    assert slow["forward"] > normal["forward"] and slow["backward"] > normal["backward"], tries
    assert report["mode"] == mode
    summary = report["summary"]
    assert summary[0]["name"] == LINEAR and summary[1]["name"] == LINEAR  # backward (2 mm) then forward (1 mm)
    assert [e["calls"] for e in summary] == [CALLS] * 6
    assert abs(sum(e["share"] for e in summary) - 1.0) < 1e-9
    rows = report["rows"]
    run_dir = Path(report["run_dir"])
    assert len(rows) == CALLS * 3 * 2  # linear, relu, sum; forward and backward
    assert {(r["name"], r["phase"]) for r in rows} == {(n, p) for n in (LINEAR, "torch.Tensor.relu", "torch.Tensor.sum")
                                                       for p in ("forward", "backward")}
    first = next(r for r in rows if r["name"] == LINEAR and r["phase"] == "backward")
    assert first["elapsed_ms"] > 8 and "F.linear(x, w)" in first["call_site"] and first["step"] >= 1
    with open(run_dir / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == ["id", "name", "phase", "elapsed_ms", "step", "call_site", "rank"]
    assert len(table) == len(rows) and {r["rank"] for r in table} == {"0"}
    with open(run_dir / "summary.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert [(r["name"], r["phase"], int(r["calls"])) for r in written] == \
        [(e["name"], e["phase"], e["calls"]) for e in summary]
    page = (run_dir / "timing_report.html").read_text()
    assert "<svg" in page and LINEAR in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    head = f"OpTimeMeasure ({mode} mode): {3 * CALLS} forward and {3 * CALLS} backward calls timed"
    printed = err[err.rindex(head):].splitlines()[:6]
    assert printed[2].startswith(LINEAR) and "backward" in printed[2] and printed[5].startswith("... and 3 more")


def test_w1_losses_are_bitwise_unchanged_and_the_default_mode(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # W1 runs next to the timing test (-n 2): leave it a CPU
    plain = w1_step("dipu")
    expected = [plain() for _ in range(2)]
    timed = w1_step("dipu")
    with OpTimeMeasure(device="dipu", results_dir=tmp_path, top=0) as tool:
        losses = [timed() for _ in range(2)]
    torch.set_num_threads(threads)
    assert losses == expected
    assert tool.mode == "event" and OpTimeMeasure(device="cpu", results_dir=tmp_path).mode == "sync"
    summary = tool.summary()
    assert {e["phase"] for e in summary} == {"forward", "backward"} and summary[0]["total_ms"] > 0
    assert FEATURES["time_measure"] is OpTimeMeasure and op_tools.OpTimeMeasure is OpTimeMeasure


def test_lists_mode_checks_and_bounded_pending_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_TIME_MEASURE_LIST", "torch.nn.functional.linear,torch.Tensor.relu")
    monkeypatch.setenv("OP_TIME_MEASURE_DISABLE_LIST", "torch.Tensor.relu")
    monkeypatch.setenv("OP_TIME_MEASURE_MODE", "sync")
    with OpTimeMeasure(device="dipu", results_dir=tmp_path, top=0) as tool:
        small_model()
    assert tool.mode == "sync"
    assert {(e["name"], e["phase"], e["calls"]) for e in tool.summary()} == {(LINEAR, "forward", CALLS),
                                                                             (LINEAR, "backward", CALLS)}
    monkeypatch.delenv("OP_TIME_MEASURE_LIST")
    monkeypatch.delenv("OP_TIME_MEASURE_DISABLE_LIST")
    monkeypatch.setenv("OP_TIME_MEASURE_MODE", "fast")
    with pytest.raises(ValueError, match="OP_TIME_MEASURE_MODE"):
        OpTimeMeasure(device="dipu")
    monkeypatch.delenv("OP_TIME_MEASURE_MODE")
    with pytest.raises(ValueError, match="timing events"):
        OpTimeMeasure(device="cpu", mode="event")
    # Event mode reads the events whenever MAX_PENDING calls wait: memory stays bounded, every row arrives.
    monkeypatch.setattr(time_measure, "MAX_PENDING", 4)
    seen = []
    with OpTimeMeasure(device="dipu", mode="event", results_dir=tmp_path, top=0) as tool:
        original = tool._resolve

        def resolve() -> None:
            seen.append(len(tool._pending))
            original()

        tool._resolve = resolve
        small_model()
        assert len(tool._pending) < 4
    assert seen and max(seen) <= 4 and len(tool.results) == CALLS * 3 * 2


_RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch.distributed as dist
    from op_tools import OpTimeMeasure

    dist.init_process_group("gloo")
    original = dist.all_reduce
    t = torch.ones(4)
    with OpTimeMeasure(device="cpu", results_dir=sys.argv[1], run_id="dist", top=0) as tool:
        for _ in range(3):
            dist.all_reduce(t)
        dist.broadcast(t, src=0)
        dist.barrier()
    entries = {e["name"]: e["calls"] for e in tool.summary() if e["name"].startswith("torch.distributed.")}
    print(json.dumps({"rank": dist.get_rank(), "calls": entries, "restored": dist.all_reduce is original,
                      "value": t[0].item()}))
    dist.destroy_process_group()
""")


def _pythonpath() -> str:
    return str(Path(op_tools.__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")


def test_collectives_of_two_gloo_processes_are_timed(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "PYTHONPATH": _pythonpath()}
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    reports = sorted((json.loads(out.strip().splitlines()[-1]) for out, _ in outputs), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:
        assert r["calls"] == {"torch.distributed.all_reduce": 3, "torch.distributed.broadcast": 1,
                              "torch.distributed.barrier": 1}
        assert r["restored"] and r["value"] == 8.0
    assert (tmp_path / "op_time_measure" / "dist" / "rank1" / "summary.csv").is_file()
