"""Count the host synchronisations of the W1 training step on dipu, plain and under each op_tools tool.

    python benchmarks/bench_sync_counts.py [--out FILE] [--steps N]

W1 (benchmarks/bench_common.w1_step("dipu"): a 2-layer Llama, AdamW; the step ends with ``loss.item()``, one
synchronisation) runs ``--steps`` steps plain and under each tool, and ``torch_dipu.host_sync`` counts every
point where the host waits for the device (device-to-host copies, ``item()``, data-dependent shapes,
``synchronize``, event waits; CPU fallbacks count as a device-to-host copy). Per case: ``value`` is the
median synchronisations per step under the tool, ``baseline`` the plain figure, ``ratio`` their quotient;
``added_per_step`` (value - baseline), ``max_per_step``, ``start_stop`` (synchronisations of starting and
stopping the tool, outside the steps), ``by_kind`` (per step, median of each kind) and
``device_kernels_per_step`` (vendor kernel calls per step, the tool's own device work included). The plain
case also gives ``aten_ops_per_step``: the ATen operators one step dispatches to the device, for scale.

A tool that adds no synchronisation per op has ``added_per_step`` at most a small constant while the step
runs hundreds of operators. Counts do not depend on the machine's speed. Writes one JSON file in the
project's benchmark format (see benchmarks/README.md) and prints one line per case.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench_common import LineCounter, environment, make_tool, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sync_counts.json"

#: The tools counted (bench_common.make_tool kinds), after ``plain``.
KINDS = ["observe_to_file", "time_measure_event", "capture_stats", "time_measure_sync", "capture", "autocompare",
         "overflow_check", "fallback"]


def _aten_ops_per_step(step: Any) -> int:
    """ATen operators dispatched to the device in one plain step."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        step()
    return Counting.calls


def _count(kind: str, step: Any, steps: int, workdir: Path) -> dict[str, Any]:
    """Synchronisations per step (and by kind) of ``steps`` steps under the tool of ``kind``."""
    from torch_dipu.call_counter import count_function_calls
    from torch_dipu.host_sync import counting

    out_dir = workdir / kind
    out_dir.mkdir(parents=True, exist_ok=True)
    per_step: list[int] = []
    kinds: list[dict[str, int]] = []
    tool = make_tool(kind, out_dir)
    with contextlib.redirect_stderr(LineCounter()), counting() as whole, count_function_calls() as kernels, tool:
        for _ in range(steps):
            with counting() as counts:
                step()
            per_step.append(counts.total)
            kinds.append(counts.by_kind)
    by_kind = {k: statistics.median(c[k] for c in kinds) for k in kinds[0]}
    return {"per_step": per_step, "start_stop": whole.total - sum(per_step),
            "by_kind": {k: v for k, v in by_kind.items() if v},
            "device_kernels_per_step": sum(Counter(kernels).values()) // steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated tools to count")
    args = parser.parse_args(argv)

    import torch_dipu  # noqa: F401

    step = w1_step("dipu")
    step()  # warm-up: handlers built, optimizer state created
    ops = _aten_ops_per_step(step)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_sync_counts-") as tmp:
        plain = _count("plain", step, args.steps, Path(tmp))
        base = statistics.median(plain["per_step"])
        for kind in ["plain", *[k for k in args.kinds.split(",") if k]]:
            try:
                counted = plain if kind == "plain" else _count(kind, step, args.steps, Path(tmp))
            except Exception as exc:  # a tool that cannot run here: a row that says why
                results.append({"case": f"w1_syncs_per_step_{kind}", "value": None, "baseline": base,
                                "ratio": None, "note": f"{type(exc).__name__}: {exc}"})
                print(f"{kind}: not counted ({type(exc).__name__}: {exc})")
                continue
            value = statistics.median(counted["per_step"])
            result = {"case": f"w1_syncs_per_step_{kind}", "value": value, "baseline": base,
                      "ratio": round(value / base, 3) if base else None, "added_per_step": value - base,
                      "max_per_step": max(counted["per_step"]), "start_stop": counted["start_stop"],
                      "by_kind": counted["by_kind"], "device_kernels_per_step": counted["device_kernels_per_step"]}
            if kind == "plain":
                result["aten_ops_per_step"] = ops
            results.append(result)
            print(f"{kind}: {value:g} synchronisations per step (plain {base:g}, added {value - base:g}, "
                  f"max {result['max_per_step']}, start+stop {result['start_stop']}), "
                  f"{result['device_kernels_per_step']} device kernels per step, by kind {result['by_kind']}")
    print(f"plain step: {ops} ATen ops dispatched to the device")
    payload = {"name": "sync_counts", "unit": "synchronisations per step", "results": results,
               "env": {**environment(), "steps": args.steps, "aten_ops_per_step": ops}}
    write_json(args.out, payload)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
