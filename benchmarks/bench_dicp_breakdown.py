"""Where a compiled W1 training step spends its time with ``backend="onnxgraph"``.

    python benchmarks/bench_dicp_breakdown.py [--out FILE] [--steps 30]

One process, the W1 training step (bench_common.w1_step's model and data) compiled with onnxgraph, run
``--steps`` times after 5 warm-up steps, twice:

1. timed: the forward call and ``loss.backward()`` around each ONNX Runtime run (the runner wrapped): cases
   ``forward_ms`` / ``backward_ms`` (median per step, ``ort_ms`` = the runs inside it, ``outside_ms`` = the rest:
   dynamo's guards, AOTAutograd's wrappers, the autograd engine) and ``optimizer_ms`` (AdamW, eager);
2. profiled: ORT's own profiler on fresh sessions: per graph (``forward``, ``backward``) the nodes per run and the
   kernel time per op type (``ort_<graph>_<OpType>_us``, value = microseconds per run, ``nodes`` = nodes of that type;
   the profiler's overhead inflates these: compare op types with each other, not with the timed figures).

Writes one JSON file in the project's benchmark format (default benchmarks/results/dicp_breakdown.json).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench_common import environment, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dicp_breakdown.json"
WARMUP = 5


def _timed(steps: int) -> list[dict]:
    """Forward / backward / optimizer medians, and the ORT runs inside forward and backward."""
    import dicp.vendor.onnxgraph.runtime as runtime

    load, runs = runtime.load, []

    def timed_load(artifact: bytes, gm: torch.fx.GraphModule) -> Any:
        run, index = load(artifact, gm), len(runs)
        runs.append([])

        def timed_run(*inputs: Any) -> Any:
            start = time.perf_counter()
            out = run(*inputs)
            runs[index].append(time.perf_counter() - start)
            return out

        return timed_run

    runtime.load = timed_load
    try:
        torch.manual_seed(0)
        step = w1_step("cpu", backend="onnxgraph")
        forward, backward, optimizer = step.parts  # type: ignore[attr-defined]
        times: dict[str, list[float]] = collections.defaultdict(list)
        for i in range(WARMUP + steps):
            marks = [time.perf_counter()]
            loss = forward()
            marks.append(time.perf_counter())
            backward(loss)
            marks.append(time.perf_counter())
            optimizer(loss)
            marks.append(time.perf_counter())
            if i >= WARMUP:
                for name, a, b in (("forward", 0, 1), ("backward", 1, 2), ("optimizer", 2, 3)):
                    times[name].append(marks[b] - marks[a])
    finally:
        runtime.load = load
    rows = []
    for index, name in enumerate(("forward", "backward")):
        total = statistics.median(times[name]) * 1e3
        ort = statistics.median(runs[index][WARMUP:]) * 1e3 if index < len(runs) else 0.0
        rows.append({"case": f"{name}_ms", "value": round(total, 4), "unit": "ms", "ort_ms": round(ort, 4),
                     "outside_ms": round(total - ort, 4)})
    rows.append({"case": "optimizer_ms", "value": round(statistics.median(times["optimizer"]) * 1e3, 4),
                 "unit": "ms"})
    return rows


def _profiled(steps: int, folder: str) -> list[dict]:
    """Per graph, ORT's kernel time per op type (microseconds per run) from its profiler."""
    import dicp.vendor.onnxgraph.runtime as runtime

    options, prefixes = runtime.session_options, []

    def profiling_options() -> Any:
        opts = options()
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(folder, f"graph{len(prefixes)}")
        prefixes.append(opts.profile_file_prefix)
        return opts

    runtime.session_options = profiling_options
    try:
        torch._dynamo.reset()
        step = w1_step("cpu", backend="onnxgraph")
        for _ in range(WARMUP + steps):
            step()
        torch._dynamo.reset()  # the sessions go: ORT writes their profiles
        import gc

        gc.collect()
    finally:
        runtime.session_options = options
    rows = []
    for name, prefix in zip(("forward", "backward"), prefixes, strict=False):
        files = sorted(Path(folder).glob(Path(prefix).name + "*.json"))
        if not files:
            continue
        events = json.loads(files[-1].read_text())
        model_runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][WARMUP:]
        if not model_runs:
            continue
        first = model_runs[0]["ts"]
        per_op: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= first:
                per_op[e["args"].get("op_name", "?")][0] += 1
                per_op[e["args"].get("op_name", "?")][1] += e["dur"]
        n = len(model_runs)
        rows.append({"case": f"ort_{name}_run_us", "value": round(sum(r["dur"] for r in model_runs) / n, 1),
                     "unit": "us", "nodes": round(sum(c for c, _ in per_op.values()) / n, 1)})
        for op, (count, dur) in sorted(per_op.items(), key=lambda kv: -kv[1][1]):
            rows.append({"case": f"ort_{name}_{op}_us", "value": round(dur / n, 1), "unit": "us",
                         "nodes": round(count / n, 1)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_dicp_breakdown-") as folder:
        os.environ["DICP_CACHE"] = "0"
        from dicp.config import reset_config

        reset_config()
        results = _timed(args.steps) + _profiled(args.steps, folder)
    for row in results:
        extra = "".join(f", {k} {row[k]}" for k in ("ort_ms", "outside_ms", "nodes") if k in row)
        print(f"{row['case']}: {row['value']} {row['unit']}{extra}")
    write_json(args.out, {"name": "dicp_breakdown", "unit": "ms (timed) and us (ORT profiler)", "results": results,
                          "env": {**environment(), "steps": args.steps}})
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
