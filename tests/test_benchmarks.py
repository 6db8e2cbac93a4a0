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
        assert row["value"] > 0 and row["baseline"] > 0 and row["ratio"] > 0
        if row["case"] in {"w1_step_autocompare", "w1_step_overflow_check", "w1_step_fallback", "w1_step_dtype_cast"}:
            assert isinstance(row["losses_bitwise_equal_to_plain"], bool) and row["console_lines_per_step"] >= 0
        if row["case"] == "w1_step_capture_stats":  # the statistics kernel measured on its own
            assert row["reductions_ms_per_step"] > 0 and row["tensors_reduced_per_step"] > 500
            assert row["elements_reduced_per_step"] > 10**6 and row["ratio_without_reductions"] < row["ratio"]
    assert report["env"]["torch"] and report["env"]["dipu_vendor"] == "droplet"
