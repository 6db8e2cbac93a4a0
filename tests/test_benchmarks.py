"""The benchmark commands run and write JSON in the project's format (numbers are not judged here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    ("script", "args", "cases"),
    [
        ("bench_dipu.py", ["--rounds", "1"], {"w1_train_step", "dispatch_overhead_us", "dispatch_view_overhead_us"}),
        ("bench_import.py", ["--pairs", "1", "--rounds", "1", "--steps", "1", "--warmup", "1"],
         {"w1_train_step_import"}),
        ("bench_op_tools.py", ["--rounds", "1", "--steps", "1"],
         {"w1_step_observe_to_file", "w1_step_capture", "w1_step_capture_stats"}),
        ("bench_op_accuracy.py", ["--rounds", "1", "--steps", "1", "--rss-steps", "12"],
         {"w1_step_autocompare", "w1_step_overflow_check", "w1_step_fallback", "w1_step_dtype_cast",
          "w1_autocompare_rss_growth"}),
        ("bench_engine_call.py", ["--calls", "200", "--rounds", "1"],
         {"engine_call_nop_observer", "engine_call_observe_to_file"}),
        ("bench_conformance.py", ["--workers", "1", "--functions", "diopiAdd"],
         {"conformance_gen_s", "conformance_run_impl_droplet_s", "cases"}),
        ("bench_observe_breakdown.py", ["--rounds", "1", "--steps", "1"],
         {"w1_step_empty_mode_dipu", "w1_step_nop_observer_dipu", "w1_step_nop_observer_backward_dipu",
          "w1_step_observe_no_backward_dipu", "w1_step_observe_to_file_dipu"}),
    ],
)
def test_benchmark_writes_its_json(tmp_path: Path, script: str, args: list[str], cases: set[str]) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert {"name", "unit", "results", "env"} <= set(report)
    assert {r["case"] for r in report["results"]} == cases
    for row in report["results"]:
        if row["case"] == "w1_autocompare_rss_growth":  # a growth of memory: zero or negative is possible
            assert row["baseline"] > 0 and row["rss_mb_after_last_step"] > 0 and row["steps"] == 12
            assert row["value"] == row["rss_growth_mb_after_step_10"] and row["unit"] == "MB"
            continue
        if row["case"].startswith("engine_call_"):  # differences of timings: noise on a busy machine can flip signs
            assert all(isinstance(row[k], (int, float)) for k in ("value", "baseline", "plain_us"))
            continue
        assert row["value"] > 0 and row["baseline"] > 0 and row["ratio"] > 0
        if row["case"] in {"w1_step_autocompare", "w1_step_overflow_check", "w1_step_fallback", "w1_step_dtype_cast"}:
            assert isinstance(row["losses_bitwise_equal_to_plain"], bool) and row["console_lines_per_step"] >= 0
        if row["case"] == "w1_step_capture_stats":  # the statistics kernel measured on its own
            assert row["reductions_ms_per_step"] > 0 and row["tensors_reduced_per_step"] > 500
            assert row["elements_reduced_per_step"] > 10**6 and row["ratio_without_reductions"] < row["ratio"]
    assert report["env"]["torch"] and report["env"]["dipu_vendor"] == "droplet"


def test_suite_quick_writes_json_and_table(tmp_path: Path) -> None:
    """``python -m benchmarks --quick`` from the repository root: every tool and "inactive" on both devices."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out-dir", str(tmp_path)],
                          cwd=BENCHMARKS.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "suite.json").read_text())
    assert report["name"] == "suite" and report["unit"] == "ms" and report["env"]["dipu_vendor"] == "droplet"
    tools = {"inactive", "observe_to_file", "capture", "capture_stats", "autocompare", "overflow_check", "fallback",
             "dtype_cast", "time_measure_event", "time_measure_sync"}
    engine_cases = {"engine_call_nop_observer", "engine_call_observe_to_file"}
    assert {r["case"] for r in report["results"]} == {f"w1_step_{t}_{d}" for t in tools
                                                      for d in ("cpu", "dipu")} | engine_cases
    for row in (r for r in report["results"] if r["case"] in engine_cases):
        assert row["value"] > 0 and row["baseline"] > 0 and row["unit"] == "us"
    for row in (r for r in report["results"] if r["case"] not in engine_cases):
        assert row["baseline"] > 0 and row["target_ratio"] > 0
        if row["value"] is None:  # a tool that could not run says why
            assert row["note"].startswith("skipped") and row["ratio"] is None and row["met"] is None
        else:
            assert row["value"] > 0 and row["ratio"] > 0 and row["met"] == (row["ratio"] <= row["target_ratio"])
    assert next(r for r in report["results"] if r["case"] == "w1_step_inactive_dipu")["target_ratio"] == 1.02
    table = (tmp_path / "suite.md").read_text()
    assert table.startswith("# op_tools benchmark suite") and "cpu_count" in table
    assert "| dipu | capture |" in table and "| cpu | inactive |" in table and "python -m benchmarks --quick" in table


def _run_benchmark(tmp_path: Path, script: str, args: list[str]) -> dict:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert {"name", "unit", "results", "env"} <= set(report) and report["env"]["dipu_vendor"] == "droplet"
    return {row["case"]: row for row in report["results"]}


def test_sync_counts_benchmark(tmp_path: Path) -> None:
    """Host synchronisations per W1 step: the observation tools add none per op (the counts are exact)."""
    rows = _run_benchmark(tmp_path, "bench_sync_counts.py", ["--steps", "2"])
    plain = rows["w1_syncs_per_step_plain"]
    assert plain["value"] == 1 and plain["aten_ops_per_step"] > 300  # the loss's item()
    for case in ("observe_to_file", "time_measure_event"):
        assert rows[f"w1_syncs_per_step_{case}"]["added_per_step"] == 0
    assert rows["w1_syncs_per_step_capture_stats"]["added_per_step"] <= 1
    for case in ("time_measure_sync", "capture", "autocompare"):  # tools that read every op's results
        assert rows[f"w1_syncs_per_step_{case}"]["added_per_step"] > 100


def test_allocator_benchmark(tmp_path: Path) -> None:
    rows = _run_benchmark(tmp_path, "bench_allocator.py", ["--rounds", "1", "--steps", "1"])
    assert {"w1_step_ms_latency0", "w1_step_ms_latency50", "vendor_calls_per_step_latency0",
            "vendor_calls_per_step_latency50", "reserved_over_allocated"} <= set(rows)
    calls = rows["vendor_calls_per_step_latency0"]
    assert calls["baseline"] > 100 and calls["value"] < calls["baseline"] / 10  # the cache serves a warm step
    assert rows["reserved_over_allocated"]["value"] >= 1 and rows["w1_step_ms_latency50"]["value"] > 0


def test_dicl_bandwidth_benchmark(tmp_path: Path) -> None:
    rows = _run_benchmark(tmp_path, "bench_dicl.py", ["--sizes", "65536", "--seconds", "0.02"])
    assert set(rows) == {"all_reduce_65536B"}
    for row in rows.values():
        assert row["value"] > 0 and row["baseline"] > 0 and row["unchecked_gbps"] > 0
        assert row["ratio"] == pytest.approx(row["value"] / row["baseline"], rel=1e-2)


def test_ddp_benchmark(tmp_path: Path) -> None:
    """DDP of W1 on 2 processes against 1 (one torchrun launch) and the dicl time per step: structure only."""
    rows = _run_benchmark(tmp_path, "bench_ddp.py", ["--rounds", "1", "--steps", "1", "--warmup", "1"])
    assert set(rows) == {"w1_ddp_step_2proc", "w1_ddp_step_1proc", "w1_dicl_ms_per_step_2proc",
                         "w1_dicl_ms_per_step_2proc_nocheck"}
    for row in rows.values():
        if row["case"].startswith("engine_call_"):  # differences of timings: noise on a busy machine can flip signs
            assert all(isinstance(row[k], (int, float)) for k in ("value", "baseline", "plain_us"))
            continue
        assert row["value"] > 0 and row["baseline"] > 0 and row["ratio"] > 0 and row["unit"] == "ms"
    step = rows["w1_ddp_step_2proc"]
    assert step["processes"] == [2, 1] and step["per_rank_batch"] == [2, 64] and step["buckets"] >= 1
    dicl = rows["w1_dicl_ms_per_step_2proc"]
    assert dicl["allreduce_calls_per_step"] == step["buckets"]
    assert dicl["allreduce_bytes_per_step"] == 4 * 551_552  # every W1 gradient (float32) reduced once a step


def test_module_dump_benchmark(tmp_path: Path) -> None:
    rows = _run_benchmark(tmp_path, "bench_module_dump.py", ["--rounds", "1", "--steps", "1", "--devices", "dipu"])
    assert set(rows) == {"w1_step_ms_stats_only_dipu", "w1_step_ms_full_dipu"}
    for row in rows.values():
        if row["case"].startswith("engine_call_"):  # differences of timings: noise on a busy machine can flip signs
            assert all(isinstance(row[k], (int, float)) for k in ("value", "baseline", "plain_us"))
            continue
        assert row["value"] > 0 and row["baseline"] > 0 and row["ratio"] > 0


def test_dicp_benchmark(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    rows = _run_benchmark(tmp_path, "bench_dicp.py",
                          ["--no-inductor", "--no-train", "--rounds", "1", "--steps", "1", "--batch", "1",
                           "--seq", "16"])
    assert set(rows) == {f"llama_infer_{kind}_{backend}" for kind in ("first_call_s", "step_ms")
                         for backend in ("eager", "onnxgraph")}
    assert rows["llama_infer_step_ms_onnxgraph"]["equal_to_eager"] is True
    assert rows["llama_infer_first_call_s_onnxgraph"]["target"] == 3.0
    for row in rows.values():
        assert row["value"] > 0


def test_dicp_breakdown_benchmark(tmp_path: Path) -> None:
    """The compiled step's time split: ORT's runs are part of forward and backward, and the profiler names the
    matmuls and counts the nodes of both graphs."""
    pytest.importorskip("onnxruntime")
    rows = _run_benchmark(tmp_path, "bench_dicp_breakdown.py", ["--steps", "2"])
    for graph in ("forward", "backward"):
        row = rows[f"{graph}_ms"]
        assert 0 < row["ort_ms"] < row["value"] and row["outside_ms"] > 0
        assert rows[f"ort_{graph}_run_us"]["nodes"] > 50
        assert any(case.startswith(f"ort_{graph}_") and "MatMul" in case for case in rows)
    assert rows["optimizer_ms"]["value"] > 0


def test_dlinfer_instruction_rows_from_counts(monkeypatch) -> None:
    """bench_dlinfer_instructions: per decode step = (I(long) - I(2)) / (generations * (NEW_TOKENS - 2)), prefill =
    I(2) / generations, ratio = dlinfer / stock (callgrind itself is not run here: minutes under valgrind)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_dlinfer_instructions as bench

    counts = {(False, 2): 400, (False, bench.NEW_TOKENS): 400 + 2 * 30 * 10, (True, 2): 300,
              (True, bench.NEW_TOKENS): 300 + 2 * 30 * 9}
    monkeypatch.setattr(bench, "count", lambda family, use, generations, tokens: counts[(use, tokens)])
    prefill, decode = bench.bench_family("llama", generations=2)
    fields = ("case", "value", "baseline", "ratio")
    assert tuple(prefill[k] for k in fields) == ("llama_prefill", 150, 200, 0.75)
    assert tuple(decode[k] for k in fields) == ("llama_decode", 9, 10, 0.9)
    monkeypatch.setattr(bench, "missing_callgrind", lambda: ["valgrind"])
    with pytest.raises(SystemExit):
        bench.main(["--families", "llama"])


def test_dipu_instruction_rows_from_counts(monkeypatch) -> None:
    """bench_dipu_instructions: per call = (I(long) - I(short)) / extra calls; add's value and floor are over the CPU's
    per call, W1's ratios are dipu / CPU and dipu / floor (callgrind itself is not run here: minutes under valgrind)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_dipu_instructions as bench

    per = {"add": {"cpu": 10, "nop_subclass": 50, "dipu": 70}, "w1": {"cpu": 100, "nop_subclass": 140, "dipu": 160}}

    def counter(case: str, side: str, n: int) -> int:
        return 1000 + per[case][side] * n

    add = bench.rows("add", 100, counter)
    fields = ("value", "baseline", "floor_nop_subclass", "floor_ratio_nop_subclass")
    assert tuple(add[k] for k in fields) == (60, 10, 40, 1.5)
    w1 = bench.rows("w1", 2, counter)
    assert (w1["value"], w1["baseline"], w1["ratio"], w1["floor_ratio_nop_subclass"]) == (160, 100, 1.6, 1.143)
    monkeypatch.setattr(bench, "missing_callgrind", lambda: ["valgrind"])
    with pytest.raises(SystemExit):
        bench.main([])


def test_suite_table_takes_an_engine_row_whose_floor_measured_nothing(monkeypatch) -> None:
    """On a loaded machine the empty mode's cost can come out <= 0: the engine row's ratio is None, shown as "-"."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_suite

    env = {k: "x" for k in ("timestamp", "platform", "machine", "cpu_count", "torch_threads", "torch", "dipu_vendor",
                            "git_commit", "rounds", "steps_per_round", "inactive_pairs", "inactive_child_rounds",
                            "inactive_child_steps")}
    row = {"device": "cpu", "tool": "engine_call_nop_observer", "value": 1.5, "baseline": -0.1, "ratio": None,
           "target_ratio": 2, "met": None}
    table = bench_suite.markdown({"env": env, "results": [row]}, "python -m benchmarks --quick")
    line = "| cpu | engine_call_nop_observer (us/call over plain; baseline: empty mode) | 1.50 | -0.10 | - | <= 2 | - |"
    assert line in table
