"""Benchmark the dipu device against the CPU in the same process.

    python benchmarks/bench_dipu.py [--out FILE] [--rounds N]

Cases (baseline = CPU; ratio = median of per-round dipu/CPU time ratios; lower is better):

* ``w1_train_step`` (value = dipu's time): one training step of W1 (a 2-layer Llama, hidden 128, vocab 1000;
  AdamW lr=1e-3; input ids (2, 64)) in milliseconds: forward with labels, zero_grad, backward, optimizer step,
  loss.item().
* ``dispatch_overhead_us``: the per-op dispatch overhead of dipu in microseconds: the extra time of a tiny
  compute op (``x.add(x)``, x a 4x4 float32 tensor) on dipu over the same op on CPU (value), the CPU
  time (baseline) and dipu/CPU (ratio).
* ``dispatch_view_overhead_us``: the same for a view op (``x.t()``).

The machine is assumed to be small and noisy: every case warms up first, then CPU and dipu measurements
are interleaved over several rounds (alternating which goes first); values are medians and the ratio is
the median of the per-round ratios.
Writes one JSON file in the project's benchmark format (see benchmarks/README.md) and prints a short table.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from bench_common import environment, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dipu.json"
def time_calls(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` back-to-back calls (garbage collector paused)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, calls: int, warmup: int) -> dict[str, list[float]]:
    """Per-round seconds/call of each function; rounds alternate the order so drift hits both alike."""
    for fn in fns.values():
        time_calls(fn, warmup)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(time_calls(fns[name], calls))
    return samples


def result(case: str, unit: str, samples: dict[str, list[float]], scale: float, overhead: bool = False) -> dict:
    """One result row. ``overhead``: the value is dipu's extra time per call (median of per-round
    differences) instead of dipu's time per call."""
    if overhead:
        value = statistics.median(d - c for d, c in zip(samples["dipu"], samples["cpu"], strict=True)) * scale
    else:
        value = statistics.median(samples["dipu"]) * scale
    baseline = statistics.median(samples["cpu"]) * scale
    # The ratio is the median of per-round ratios: each round times both devices back to back, so a
    # slow spell of the machine affects both sides of a ratio alike.
    ratio = statistics.median(d / c for d, c in zip(samples["dipu"], samples["cpu"], strict=True))
    return {
        "case": case,
        "value": round(value, 4),
        "baseline": round(baseline, 4),
        "ratio": round(ratio, 3),
        "unit": unit,
        "spread": {  # min/max of the per-round times, for judging the noise
            "dipu": [round(min(samples["dipu"]) * scale, 4), round(max(samples["dipu"]) * scale, 4)],
            "cpu": [round(min(samples["cpu"]) * scale, 4), round(max(samples["cpu"]) * scale, 4)],
        },
    }


def run(rounds: int) -> list[dict]:
    results = []
    steps = {"cpu": w1_step("cpu"), "dipu": w1_step("dipu")}
    samples = interleaved(steps, rounds=rounds, calls=3, warmup=3)
    results.append(result("w1_train_step", "ms", samples, 1e3))

    x = {"cpu": torch.randn(4, 4), "dipu": torch.randn(4, 4).to("dipu")}
    adds = {name: (lambda t=t: t.add(t)) for name, t in x.items()}
    samples = interleaved(adds, rounds=rounds * 2, calls=2000, warmup=200)
    results.append(result("dispatch_overhead_us", "us", samples, 1e6, overhead=True))

    views = {name: (lambda t=t: t.t()) for name, t in x.items()}
    samples = interleaved(views, rounds=rounds * 2, calls=2000, warmup=200)
    results.append(result("dispatch_view_overhead_us", "us", samples, 1e6, overhead=True))
    return results


def print_table(results: list[dict]) -> None:
    print(f"{'case':<28}{'value':>12}{'baseline (cpu)':>16}{'ratio':>8}")
    for r in results:
        unit = r["unit"]
        print(f"{r['case']:<28}{r['value']:>9.3f} {unit:<2}{r['baseline']:>13.3f} {unit:<2}{r['ratio']:>8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark dipu against the CPU (see benchmarks/README.md).")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output file (default {DEFAULT_OUT})")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved measurement rounds (default 15)")
    args = parser.parse_args(argv)
    results = run(args.rounds)
    report = {
        "name": "dipu",
        "unit": "ms",
        "results": results,
        "env": environment(),
    }
    write_json(args.out, report)
    print_table(results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
