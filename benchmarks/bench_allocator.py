"""Benchmark torch_dipu's caching allocator: the W1 training step with caching (BF) against none (RAW).

    python benchmarks/bench_allocator.py [--out FILE] [--rounds N] [--latencies 0,50]

For each droplet malloc latency (``DROPLET_MALLOC_LATENCY_US``, busy-waited in every raw malloc and free):

* ``w1_step_ms_latency<L>``: value = BF's median ms per W1 step, baseline = RAW's, ratio = BF / RAW (median of
  per-round ratios; rounds interleave BF and RAW, alternating which goes first).
* ``vendor_calls_per_step_latency<L>``: vendor raw_malloc + raw_free calls per step, BF (value) and RAW (baseline).

And, once: ``reserved_over_allocated`` (BF's reserved / allocated bytes after a step; baseline RAW's, 1.0).
Both allocators run in one process, each a fresh ``CachingAllocator`` as ``state.memory`` (the W1 model and
optimizer are built once per allocator). Writes one JSON file in the project's benchmark format.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from bench_common import environment, w1_step, write_json
from torch_dipu import dispatch
from torch_dipu.allocator import CachingAllocator
from torch_dipu.state import get_state
from torch_dipu.vendors import droplet

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "allocator.json"
ALGORITHMS = ("BF", "RAW")


class Setup:
    """One allocator and the W1 step built under it."""

    def __init__(self, algorithm: str) -> None:
        state = get_state()
        self.allocator = CachingAllocator(state.runtime, algorithm)
        self.allocator.resize([state.runtime.memory_capacity(p) for p in state.physical], state.physical)
        with self:
            self.step = w1_step("dipu")
            self.step()  # warm: the BF cache fills

    def __enter__(self) -> Setup:
        self.saved = get_state().memory
        get_state().memory = self.allocator
        dispatch.clear_handlers()
        return self

    def __exit__(self, *exc: object) -> None:
        get_state().memory = self.saved
        dispatch.clear_handlers()

    def vendor_calls(self) -> int:
        stats = self.allocator.stats(0)
        return stats["num_device_alloc"] + stats["num_device_free"]

    def timed(self, steps: int) -> tuple[float, float]:
        """(ms per step, vendor calls per step) over ``steps`` steps (garbage collector paused)."""
        with self:
            gc.collect()
            gc.disable()
            calls = self.vendor_calls()
            start = time.perf_counter()
            try:
                for _ in range(steps):
                    self.step()
            finally:
                elapsed = time.perf_counter() - start
                gc.enable()
            return elapsed / steps * 1e3, (self.vendor_calls() - calls) / steps


def run(rounds: int, steps: int, latencies: list[float]) -> list[dict]:
    setups = {name: Setup(name) for name in ALGORITHMS}
    results = []
    for latency in latencies:
        with droplet.switches(malloc_latency_us=latency):
            times: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
            calls: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
            for r in range(rounds):
                for name in ALGORITHMS if r % 2 == 0 else reversed(ALGORITHMS):
                    ms, n = setups[name].timed(steps)
                    times[name].append(ms)
                    calls[name].append(n)
        tag = f"latency{latency:g}"
        results.append({
            "case": f"w1_step_ms_{tag}", "unit": "ms",
            "value": round(statistics.median(times["BF"]), 3), "baseline": round(statistics.median(times["RAW"]), 3),
            "ratio": round(statistics.median(b / r for b, r in zip(times["BF"], times["RAW"], strict=True)), 3),
            "spread": {name: [round(min(t), 3), round(max(t), 3)] for name, t in times.items()},
        })
        bf_calls, raw_calls = statistics.median(calls["BF"]), statistics.median(calls["RAW"])
        results.append({"case": f"vendor_calls_per_step_{tag}", "unit": "calls", "value": bf_calls,
                        "baseline": raw_calls, "ratio": round(bf_calls / raw_calls, 4) if raw_calls else None})
    figures = {}
    for name, setup in setups.items():
        with setup:
            setup.step()
            figures[name] = setup.allocator.reserved(0) / setup.allocator.allocated(0)
    results.append({"case": "reserved_over_allocated", "unit": "ratio", "value": round(figures["BF"], 3),
                    "baseline": round(figures["RAW"], 3), "ratio": round(figures["BF"] / figures["RAW"], 3)})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the dipu caching allocator (see benchmarks/README.md).")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output file (default {DEFAULT_OUT})")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per latency (default 7)")
    parser.add_argument("--steps", type=int, default=3, help="W1 steps per round (default 3)")
    parser.add_argument("--latencies", default="0,50", help="droplet malloc latencies in us (default 0,50)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    results = run(args.rounds, args.steps, [float(x) for x in args.latencies.split(",")])
    write_json(args.out, {"name": "allocator", "unit": "ms", "results": results, "env": environment()})
    print(f"{'case':<34}{'BF (value)':>12}{'RAW (baseline)':>16}{'ratio':>8}")
    for r in results:
        print(f"{r['case']:<34}{r['value']:>12}{r['baseline']:>16}{r['ratio']!s:>8}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
