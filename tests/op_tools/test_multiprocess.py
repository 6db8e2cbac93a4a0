"""op_tools in multi-process runs: per-rank folders of one shared run, a ``rank`` on every row, console lines
prefixed with the rank, and collectives seen by the tools but never run again (no CPU re-run, no tool's
``execute``): a captured collective is marked not replayable and replay skips it.

Two torchrun launches (2 processes each, bounded by ``tests/dist_launch.py``) and fast in-process checks on a
one-process group.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401  (the dipu device and its dicl backend, for the one-process group)
from diopi import case_format as cf
from diopi.result_table import launch_run_id
from dist_launch import result_line, torchrun  # tests/dist_launch.py (tests/ is on sys.path through its conftest)
from op_tools import OpAutoCompare, OpCapture, OpFallback, OpTimeMeasure, config, run_op_from_data
from op_tools.replay import replay_case

SCRIPTS = Path(__file__).parent / "dist_scripts"
LINEAR = "torch.nn.functional.linear"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _one_run(tool_root: Path) -> Path:
    """The single ``<run>`` folder of a tool, holding exactly rank0/ and rank1/."""
    runs = sorted(p for p in tool_root.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    assert sorted(p.name for p in runs[0].iterdir()) == ["rank0", "rank1"]
    return runs[0]


def test_autocompare_under_torchrun_names_the_faulty_rank_and_op(tmp_path: Path) -> None:
    """The acceptance run: DDP on 2 processes under ``ditorch run --autocompare``, a droplet fault on rank 1."""
    proc = torchrun(SCRIPTS / "ddp_fault.py", env={"OP_TOOLS_RESULTS_DIR": str(tmp_path)}, timeout=150,
                    prefix=("-m", "ditorch", "run", "--autocompare", "--"))
    seen = result_line(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seen == [{"rank": 0, "value": [3.0] * 3}, {"rank": 1, "value": [3.0] * 3}]  # each collective ran once
    summaries = {m.group(1): line for line in proc.stderr.splitlines()
                 if (m := re.match(r"\[rank(\d)\] OpAutoCompare: \d+ checks: ", line))}
    assert set(summaries) == {"0", "1"}, proc.stderr[-3000:]
    assert f"FAIL (first FAIL: {LINEAR} #" in summaries["1"], summaries["1"]
    assert "FAIL" not in summaries["0"], summaries["0"]
    assert not [line for line in proc.stderr.splitlines() if line.startswith("[rank0]") and "FAIL" in line]
    assert any(line.startswith(f"[rank1] OpAutoCompare: step 1: {LINEAR}: ") for line in proc.stderr.splitlines())

    run = _one_run(tmp_path / "op_autocompare")
    for rank in (0, 1):
        rows = _rows(run / f"rank{rank}" / "results.jsonl")
        assert rows and {r["rank"] for r in rows} == {rank}
        failed = {r["name"] for r in rows if r["verdict"] == "FAIL"}
        assert failed == (set() if rank == 0 else {LINEAR})
        collectives = [(r["name"], r["verdict"], r["message"]) for r in rows if r["name"].startswith("torch.distrib")]
        assert collectives == [(f"torch.distributed.{n}", "SKIP", "collective: not compared")
                               for n in ("all_reduce", "broadcast", "all_gather_object")]
        header = (run / f"rank{rank}" / "results.csv").read_text(encoding="utf-8").splitlines()[0]
        assert header.split(",")[-1] == "rank"


def test_time_measure_and_capture_see_collectives_on_every_rank(tmp_path: Path, capsys) -> None:
    proc = torchrun(SCRIPTS / "tools_collectives.py", str(tmp_path), timeout=150)
    seen = result_line(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    timer_run, capture_run = _one_run(tmp_path / "op_time_measure"), _one_run(tmp_path / "op_capture")
    assert timer_run.name == capture_run.name  # one run id for the whole launch, whichever tool
    p2p = {0: "send", 1: "recv"}
    for rank, entry in enumerate(seen):
        assert entry["rank"] == rank and entry["restored"]
        assert entry["y"] == [6.0] * 4  # all_reduce ran once in place
        assert entry["received"] == (None if rank == 0 else [1.0] * 4)
        assert entry["timer_dir"] == str(timer_run / f"rank{rank}")
        assert entry["capture_dir"] == str(capture_run / f"rank{rank}")
        assert entry["flagged"] == ([["torch.distributed.all_reduce", 0]] if rank == 0 else [])
        rows = _rows(timer_run / f"rank{rank}" / "results.jsonl")
        assert {r["rank"] for r in rows} == {rank}
        names = [r["name"] for r in rows if r["name"].startswith("torch.distributed.")]
        assert names == [f"torch.distributed.{n}" for n in ("all_reduce", "broadcast", p2p[rank], "barrier",
                                                            "all_reduce")]

        index = sorted(_rows(capture_run / f"rank{rank}" / "cases.jsonl"), key=lambda r: r["id"])  # 2 writers
        assert [r["op"].rsplit(".", 1)[-1] for r in index] == ["all_reduce", "broadcast", p2p[rank], "barrier",
                                                               "all_reduce"]
        assert all(r["rank"] == rank and r["collective"] for r in index)
        case_dir = capture_run / f"rank{rank}" / index[0]["dir"]
        case = cf.load_case(case_dir)
        record = case.record
        assert record["replayable"] is False and record["rank"] == rank
        assert {k: record["collective"][k] for k in ("group_size", "group_rank", "global_rank", "world_size")} == \
            {"group_size": 2, "group_rank": rank, "global_rank": rank, "world_size": 2}
        assert case.data["i0"].tolist() == [2.0 * (rank + 1)] * 4 and case.data["o0"].tolist() == [6.0] * 4

        result = replay_case(case_dir)
        assert result.status == "SKIP"
        assert result.message == ("torch.distributed.all_reduce is a collective of a group of 2 ranks (this case: "
                                  f"rank {rank}): it needs the other ranks and is not replayed alone")
    capsys.readouterr()
    assert run_op_from_data.main([str(capture_run), "--results_dir", str(tmp_path / "replay")]) == 0
    assert "10 cases: 10 skip" in capsys.readouterr().err


@pytest.fixture
def one_process_group():
    """A ``torch.distributed`` group of this process alone, on the accelerator's default backend."""
    backend = dist.get_default_backend_for_device(torch.accelerator.current_accelerator())
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch.accelerator.current_accelerator()
    finally:
        dist.destroy_process_group()


def test_collectives_are_skipped_not_rerun_and_never_executed_by_a_tool(one_process_group, tmp_path: Path,
                                                                        monkeypatch) -> None:
    device = one_process_group
    calls: list[list[str]] = []
    original = dist.broadcast

    def counting(*args, **kwargs):
        calls.append([a.device.type for a in args if isinstance(a, torch.Tensor)])
        return original(*args, **kwargs)

    monkeypatch.setattr(dist, "broadcast", counting)
    t = torch.arange(4.0, device=device)
    with OpAutoCompare(results_dir=tmp_path) as compare, OpFallback(ops=".*", results_dir=tmp_path) as fallback:
        dist.broadcast(t, 0)
        u = t * 2
        torch.distributed.distributed_c10d.all_reduce(u)  # reaches the engine's mode directly: the same name
    assert calls == [[device.type]]  # once, on the device
    assert u.device.type == device.type and u.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    rows = [(r["name"], r["verdict"], r["message"]) for r in compare.results]
    assert rows == [("torch.distributed.broadcast", "SKIP", "collective: not compared"),
                    ("torch.Tensor.mul", "PASS", "PASS out: bitwise equal"),
                    ("torch.distributed.all_reduce", "SKIP", "collective: not compared")]
    assert [r["name"] for r in fallback.results] == ["torch.Tensor.mul"]
    assert dist.broadcast is counting  # the engine's wrapper is gone with the last tool


def test_a_barrier_is_timed_and_captured_with_no_tensor(one_process_group, tmp_path: Path) -> None:
    t = torch.ones(2, device=one_process_group)
    with OpTimeMeasure(results_dir=tmp_path, run_id="r", top=0) as timer, \
            OpCapture(results_dir=tmp_path, run_id="r") as capture:
        dist.barrier()
        dist.P2POp(dist.isend, t, 0)  # P2POp checks that it got isend itself: the tools must not replace it
    assert [(r["name"], r["rank"]) for r in timer.results] == [("torch.distributed.barrier", 0)]
    (case_json,) = capture.run_dir.rglob(cf.CASE_FILE)
    record = json.loads(case_json.read_text(encoding="utf-8"))
    assert record["op"] == "torch.distributed.barrier" and record["replayable"] is False
    assert record["collective"]["group_size"] == 1 and record["tensors"] == {}


def test_ranks_of_one_launch_share_one_run_id(monkeypatch) -> None:
    """Every rank started by one launcher process (torchrun's agent: the workers' parent) gets the same ``<run>``:
    the launcher's start time and pid; a restart adds ``-restart<N>``; a single process keeps the time now."""
    parent = os.getppid()
    ranks = [launch_run_id({"WORLD_SIZE": "2", "RANK": str(r)}, parent=parent) for r in (0, 1)]
    assert ranks[0] == ranks[1] and re.fullmatch(rf"\d{{4}}-\d\d-\d\d--\d\d-\d\d-\d\d-{parent}", ranks[0]), ranks
    restarted = launch_run_id({"WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "2"}, parent=parent)
    assert restarted == f"{ranks[0]}-restart2"
    assert launch_run_id({"WORLD_SIZE": "1"}) is None and launch_run_id({}) is None
    assert launch_run_id({"WORLD_SIZE": "2"}, parent=os.getpid()) != ranks[0]  # another launcher, another run
    monkeypatch.delenv(config.RUN_ID_ENV, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert config.run_id() == ranks[0]
    monkeypatch.setenv(config.RUN_ID_ENV, "mine")
    assert config.run_id() == "mine"
