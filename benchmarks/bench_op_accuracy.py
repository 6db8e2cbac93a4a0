"""Benchmark the accuracy tools of op_tools on the W1 training step on dipu, and OpAutoCompare's host memory.

    python benchmarks/bench_op_accuracy.py [--out FILE] [--rounds N] [--steps N] [--rss-steps N]

In one process, the same W1 model (a 2-layer Llama, hidden 128, vocab 1000; AdamW lr=1e-3; input ids
(2, 64)) runs ``--steps`` training steps per round in five ways, interleaved round by round (the order
rotates from round to round) so a slow spell of the machine hits all of them alike:

* ``plain``: no tool;
* ``autocompare``: under ``OpAutoCompare(report=False)``, every call re-run on the CPU and judged, forward and
  backward (target <= 8x). The HTML report is a one-off at ``stop()`` that does not grow with the steps of a
  round, so the rounds leave it out; the memory run below times a ``stop()`` with the report instead;
* ``overflow_check``: under ``OpOverflowCheck()`` (target <= 3x);
* ``fallback``: under ``OpFallback(ops=".*")``, every call run on the CPU (target <= 3x);
* ``dtype_cast``: under ``OpDtypeCast()`` with its default table (target <= 2x). W1 is float32, so nothing
  is cast: this measures what the tool costs when it only has to decide.

A round's time includes starting the tool and stopping it. Per case: ``value`` is the median step time in ms,
``baseline`` the plain median, ``ratio`` their quotient. Each tool case also reports bytes written per step,
console (stderr) lines per step, and whether the losses were bitwise equal to the plain run's. OpAutoCompare
and OpOverflowCheck only watch, so they must not change the losses; OpFallback and OpDtypeCast may (the CPU
kernels round differently), so for them the flag is reported, not required.

Host memory: a fresh W1 model then runs ``--rss-steps`` steps (default 100) under one OpAutoCompare; the
resident set size (``VmRSS`` of ``/proc/self/status``, after a garbage collection) is read after step 10 and
after the last step. The growth in between is its own result row, ``w1_autocompare_rss_growth`` (target
< 50 MB, 1 MB = 10**6 bytes). Every results folder lives in a temporary folder that is removed at the end.

Writes one JSON file in the project's benchmark format (see benchmarks/README.md) and prints one line per case.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import TARGETS, LineCounter, dir_bytes, environment, make_tool, timed_round, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "op_accuracy.json"
KINDS = ["plain", "autocompare", "overflow_check", "fallback", "dtype_cast"]
#: Whether a tool only watches: its losses must then be bitwise those of the plain run.
WATCHES = {"autocompare": True, "overflow_check": True, "fallback": False, "dtype_cast": False}
RSS_FIRST_STEP = 10
RSS_TARGET_MB = 50.0


def _rss_mb() -> float:
    """This process's resident set size in MB (10**6 bytes), from ``VmRSS`` of ``/proc/self/status``."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError("no VmRSS line in /proc/self/status")


def _tool(kind: str, results_dir: Path, report: bool = False) -> object:
    return make_tool(kind, results_dir, report=report)


def _run(kind: str, step: object, steps: int, workdir: Path) -> tuple[float, list[float], int, int]:
    """One round: (seconds per step, losses, bytes written, console lines)."""
    return timed_round(kind, step, steps, workdir)


def _rss_run(steps: int, workdir: Path) -> dict:
    """W1 under one OpAutoCompare (with its HTML report at stop) for ``steps`` steps; RSS along the way."""
    step = w1_step("dipu")
    step()  # warm-up outside the tool, as in the timed rounds
    out_dir = workdir / "rss"
    out_dir.mkdir(parents=True)
    rss: dict[int, float] = {}
    counter = LineCounter()
    tool = _tool("autocompare", out_dir, report=True)
    with contextlib.redirect_stderr(counter):
        tool.start()
        try:
            for n in range(1, steps + 1):
                step()
                if (n >= RSS_FIRST_STEP and n % 10 == 0) or n == steps:
                    gc.collect()
                    rss[n] = _rss_mb()
        finally:
            start = time.perf_counter()
            tool.stop()
            stop_ms = (time.perf_counter() - start) * 1e3
    written = dir_bytes(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    growth = rss[steps] - rss[RSS_FIRST_STEP]
    return {
        "case": "w1_autocompare_rss_growth", "value": round(growth, 3), "baseline": round(rss[RSS_FIRST_STEP], 3),
        "ratio": round(rss[steps] / rss[RSS_FIRST_STEP], 4), "unit": "MB",
        "rss_growth_mb_after_step_10": round(growth, 3), "target_mb": RSS_TARGET_MB,
        "rss_mb_after_step_10": round(rss[RSS_FIRST_STEP], 3), "rss_mb_after_last_step": round(rss[steps], 3),
        "rss_mb_by_step": {str(n): round(v, 3) for n, v in rss.items()}, "steps": steps,
        "checks": sum(tool.counts.values()), "bytes_per_step": int(written / steps),
        "console_lines": counter.lines, "stop_with_report_ms": round(stop_ms, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rss-steps", type=int, default=100)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    if args.rss_steps <= RSS_FIRST_STEP:
        parser.error(f"--rss-steps must be more than {RSS_FIRST_STEP} (growth is measured after step {RSS_FIRST_STEP})")

    import torch_dipu  # noqa: F401

    # One model per kind, built from the same seed, so every kind trains the same model from the same
    # state and their losses can be compared step by step.
    steps_by_kind = {kind: w1_step("dipu") for kind in KINDS}
    for kind in KINDS:  # warm-up (caches, first-call costs) outside the timed rounds, without a tool
        steps_by_kind[kind]()
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    losses: dict[str, list[float]] = {k: [] for k in KINDS}
    written: dict[str, list[int]] = {k: [] for k in KINDS}
    lines: dict[str, list[int]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="bench_op_accuracy-") as tmp:
        for r in range(args.rounds):
            for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:
                t, ls, nbytes, nlines = _run(kind, steps_by_kind[kind], args.steps, Path(tmp))
                times[kind].append(t)
                losses[kind].extend(ls)
                written[kind].append(nbytes)
                lines[kind].append(nlines)
        del steps_by_kind
        gc.collect()
        rss_row = _rss_run(args.rss_steps, Path(tmp))
    base = statistics.median(times["plain"]) * 1e3
    results = []
    for kind in KINDS[1:]:
        value = statistics.median(times[kind]) * 1e3
        result = {
            "case": f"w1_step_{kind}", "value": round(value, 3), "baseline": round(base, 3),
            "ratio": round(value / base, 3), "unit": "ms", "target_ratio": TARGETS[kind],
            "bytes_per_step": int(statistics.median(written[kind]) / args.steps),
            "console_lines_per_step": statistics.median(lines[kind]) / args.steps,
            "losses_bitwise_equal_to_plain": losses[kind] == losses["plain"],
            "losses_must_be_equal": WATCHES[kind],
            "spread": {kind: [round(min(times[kind]) * 1e3, 3), round(max(times[kind]) * 1e3, 3)],
                       "plain": [round(min(times["plain"]) * 1e3, 3), round(max(times["plain"]) * 1e3, 3)]},
        }
        results.append(result)
        print(f"{result['case']}: {value:.1f} ms vs plain {base:.1f} ms, ratio {result['ratio']:.2f} "
              f"(target <= {TARGETS[kind]}), {result['bytes_per_step'] / 2**20:.2f} MiB/step, "
              f"{result['console_lines_per_step']:.2f} console lines/step, "
              f"losses equal: {result['losses_bitwise_equal_to_plain']}")
    results.append(rss_row)
    print(f"{rss_row['case']}: RSS {rss_row['rss_mb_after_step_10']:.1f} MB after step {RSS_FIRST_STEP}, "
          f"{rss_row['rss_mb_after_last_step']:.1f} MB after step {rss_row['steps']}: growth "
          f"{rss_row['value']:.1f} MB (target < {RSS_TARGET_MB:g}); stop() with the HTML report "
          f"{rss_row['stop_with_report_ms']:.0f} ms")
    payload = {"name": "op_accuracy", "unit": "ms", "results": results,
               "env": {**environment(), "rounds": args.rounds, "steps_per_round": args.steps,
                       "rss_steps": args.rss_steps}}
    write_json(args.out, payload)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
