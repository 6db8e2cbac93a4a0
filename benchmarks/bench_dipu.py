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

Beside each case, the floors of a Python device (benchmarks/dispatch_floors.py), measured in the same rounds:
``floor_nop_subclass`` (a do-nothing wrapper subclass on the CPU: the W1 step's time, or an op's extra time over the
CPU) and ``floor_empty_dispatch_mode`` (an empty ``TorchDispatchMode``, per-op cases), with ``floor_ratio_<name>`` =
the median of per-round dipu/floor ratios (targets: ``w1_train_step`` ratio <= 2.0, ``dispatch_overhead_us``
``floor_ratio_nop_subclass`` <= 1.5).

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
from typing import Any

import torch

import dispatch_floors
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


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, calls: int, warmup: int,
                modes: dict[str, Callable[[], Any]] | None = None) -> dict[str, list[float]]:
    """Per-round seconds/call of each function; rounds alternate the order so drift hits all alike. ``modes``:
    name -> a factory of the context (a dispatch mode) that function's calls run in."""
    modes = modes or {}

    def timed(name: str, n: int) -> float:
        if name not in modes:
            return time_calls(fns[name], n)
        with modes[name]():
            return time_calls(fns[name], n)

    for name in fns:
        timed(name, warmup)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(timed(name, calls))
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


def with_floors(row: dict, samples: dict[str, list[float]], scale: float, overhead: bool) -> dict:
    """Add the floors measured in the same rounds: ``floor_<name>`` (the floor's value, as ``value`` is dipu's) and
    ``floor_ratio_<name>`` (dipu's value / the floor's, median of per-round ratios)."""
    for name in FLOORS:
        if name not in samples:
            continue
        if overhead:
            per_round = [(d - c, f - c) for d, f, c in zip(samples["dipu"], samples[name], samples["cpu"], strict=True)]
        else:
            per_round = list(zip(samples["dipu"], samples[name], strict=True))
        row[f"floor_{name}"] = round(statistics.median(f for _, f in per_round) * scale, 4)
        row[f"floor_ratio_{name}"] = round(statistics.median(d / f for d, f in per_round if f > 0), 3)
    return row


def run(rounds: int) -> list[dict]:
    results = []
    steps = {"cpu": w1_step("cpu"), "dipu": w1_step("dipu"), "nop_subclass": dispatch_floors.w1_step_nop()}
    samples = interleaved(steps, rounds=rounds, calls=3, warmup=3)
    results.append(with_floors(result("w1_train_step", "ms", samples, 1e3), samples, 1e3, overhead=False))

    base = torch.randn(4, 4)
    x = {"cpu": base, "dipu": base.to("dipu"), "nop_subclass": dispatch_floors.wrap(base.clone()),
         "empty_dispatch_mode": base}
    modes = {"empty_dispatch_mode": dispatch_floors.empty_dispatch_mode}
    for case, op in (("dispatch_overhead_us", torch.Tensor.add), ("dispatch_view_overhead_us", None)):
        fns = {name: ((lambda t=t: t.add(t)) if op is not None else (lambda t=t: t.t())) for name, t in x.items()}
        samples = interleaved(fns, rounds=rounds * 2, calls=2000, warmup=200, modes=modes)
        results.append(with_floors(result(case, "us", samples, 1e6, overhead=True), samples, 1e6, overhead=True))
    return results


#: the floors measured beside dipu (benchmarks/dispatch_floors.py)
FLOORS = ("nop_subclass", "empty_dispatch_mode")


def print_table(results: list[dict]) -> None:
    print(f"{'case':<28}{'value':>12}{'baseline (cpu)':>16}{'ratio':>8}{'nop subclass':>15}{'dipu/floor':>12}")
    for r in results:
        unit = r["unit"]
        print(f"{r['case']:<28}{r['value']:>9.3f} {unit:<2}{r['baseline']:>13.3f} {unit:<2}{r['ratio']:>8.2f}"
              f"{r.get('floor_nop_subclass', float('nan')):>12.3f} {unit:<2}"
              f"{r.get('floor_ratio_nop_subclass', float('nan')):>12.2f}")


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
