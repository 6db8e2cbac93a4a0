"""Benchmark the cost of op_tools on the W1 training step on dipu.

    python benchmarks/bench_op_tools.py [--out FILE] [--rounds N] [--steps N]

In one process, the same W1 model (a 2-layer Llama, hidden 128, vocab 1000; AdamW lr=1e-3; input ids
(2, 64)) runs ``--steps`` training steps per round in four ways, interleaved round by round so a slow spell
of the machine hits all of them alike:

* ``plain``: no tool;
* ``observe_to_file``: under ``OpObserve(file=...)``, one line per call and per backward (target <= 2x);
* ``capture``: under ``OpCapture()``, every call saved with its gradients (target <= 15x);
* ``capture_stats``: under ``OpCapture(mode="stats")`` (target <= 3x). It also reports how long reducing the
  step's tensors alone takes (``reductions_ms_per_step``: the reductions alone, on copies of exactly the
  tensors one step reduces: host tensors by the CPU kernel, device ones by op_tools.deferred_stats) and the
  ratio without that part (``ratio_without_reductions``): on droplet
  the "device" reductions run on the same host cores as everything else.

A round's time includes starting the tool and, for capture, waiting at ``stop()`` until every case is on
disk. Per case: ``value`` is the median step time in ms, ``baseline`` the plain median, ``ratio`` their
quotient. Each tool case also reports bytes written per step, console lines per step, and whether the
losses were bitwise equal to the plain run's (observation must not change training).

Writes one JSON file in the project's benchmark format (see benchmarks/README.md) and prints one line per case.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import TARGETS, LineCounter, environment, timed_round, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "op_tools.json"


def _run(kind: str, steps: int, workdir: Path) -> tuple[float, list[float], int, int]:
    """One round: (seconds per step, losses, bytes written, console lines)."""
    return timed_round(kind, _run.steps_by_kind[kind], steps, workdir)


def _reduction_ms_per_step(step: object, workdir: Path) -> float:
    """The time the statistics kernel itself needs for one W1 step's tensors: record host copies of every
    tensor ``diopi::tensor_stats`` reduces during one step, then time reducing those copies alone. On
    droplet the device's reductions run on the host cores, so this part of stats mode is the "device"
    work a real accelerator would do on its own cores."""
    import op_tools
    from op_tools import deferred_stats, tensor_stats

    reduce_one, defer = tensor_stats.tensor_stats_row, deferred_stats.defer
    copies = []

    def record(t: object) -> tuple[float, ...]:
        copies.append(t.detach().clone())
        return reduce_one(t)

    def record_deferred(tensors: list, into: list) -> None:  # device tensors: reduced on the device, read later
        copies.extend(t.detach().clone() for t in tensors if t.device.type != "cpu")
        defer(tensors, into)

    tensor_stats.tensor_stats_row, deferred_stats.defer = record, record_deferred
    try:
        with contextlib.redirect_stderr(LineCounter()), op_tools.OpCapture(results_dir=workdir / "floor",
                                                                            mode="stats"):
            step()
    finally:
        tensor_stats.tensor_stats_row, deferred_stats.defer = reduce_one, defer
    on_host = [t for t in copies if t.device.type == "cpu"]
    on_device = [t for t in copies if t.device.type != "cpu"]
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for t in on_host:
            reduce_one(t)
        if on_device:
            defer(on_device, [{} for _ in on_device])
            deferred_stats.resolve()
        times.append(time.perf_counter() - start)
    _reduction_ms_per_step.tensors = len(copies)
    _reduction_ms_per_step.elements = sum(t.numel() for t in copies)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)

    import torch_dipu  # noqa: F401

    kinds = ["plain", "observe_to_file", "capture", "capture_stats"]
    # One model per kind, built from the same seed, so every kind trains the same model from the same
    # state and their losses can be compared step by step.
    _run.steps_by_kind = {kind: w1_step("dipu") for kind in kinds}
    for kind in kinds:  # warm-up (caches, first-call costs) outside the timed rounds
        _run.steps_by_kind[kind]()
    times: dict[str, list[float]] = {k: [] for k in kinds}
    losses: dict[str, list[float]] = {k: [] for k in kinds}
    written: dict[str, list[int]] = {k: [] for k in kinds}
    lines: dict[str, list[int]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="bench_op_tools-") as tmp:
        for _ in range(args.rounds):
            for kind in kinds:
                t, ls, nbytes, nlines = _run(kind, args.steps, Path(tmp))
                times[kind].append(t)
                losses[kind].extend(ls)
                written[kind].append(nbytes)
                lines[kind].append(nlines)
        reductions = _reduction_ms_per_step(_run.steps_by_kind["capture_stats"], Path(tmp))
    base = statistics.median(times["plain"]) * 1e3
    results = []
    for kind in kinds[1:]:
        value = statistics.median(times[kind]) * 1e3
        result = {
            "case": f"w1_step_{kind}", "value": round(value, 3), "baseline": round(base, 3),
            "ratio": round(value / base, 3), "target_ratio": TARGETS[kind],
            "bytes_per_step": int(statistics.median(written[kind]) / args.steps),
            "console_lines_per_step": statistics.median(lines[kind]) / args.steps,
            "losses_bitwise_equal_to_plain": losses[kind] == losses["plain"],
        }
        if kind == "capture_stats":
            result["reductions_ms_per_step"] = round(reductions, 3)
            result["tensors_reduced_per_step"] = _reduction_ms_per_step.tensors
            result["elements_reduced_per_step"] = _reduction_ms_per_step.elements
            result["ratio_without_reductions"] = round((value - reductions) / base, 3)
        results.append(result)
        print(f"{result['case']}: {value:.1f} ms vs plain {base:.1f} ms, ratio {result['ratio']:.2f} "
              f"(target <= {TARGETS[kind]}), {result['bytes_per_step'] / 2**20:.2f} MiB/step, "
              f"{result['console_lines_per_step']:.2f} console lines/step, "
              f"losses equal: {result['losses_bitwise_equal_to_plain']}")
        if kind == "capture_stats":
            print(f"  of which reducing {result['tensors_reduced_per_step']} tensors "
                  f"({result['elements_reduced_per_step'] / 1e6:.1f} M elements) alone takes {reductions:.1f} ms; "
                  f"the rest is ratio {result['ratio_without_reductions']:.2f}")
    payload = {"name": "op_tools", "unit": "ms", "results": results,
               "env": {**environment(), "rounds": args.rounds, "steps_per_round": args.steps}}
    write_json(args.out, payload)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
