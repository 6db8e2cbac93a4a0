"""Benchmark "no cost when idle": the W1 training step on dipu without and with ``import ditorch``.

    python benchmarks/bench_import.py [--out FILE] [--pairs N] [--rounds N]

``import ditorch`` cannot be undone inside a process, so the two sides run in separate, otherwise
identical child processes (same imports, seed, model, data, warm-up and timing loop; the only
difference is the ``import ditorch`` line before the model is built). The children run one after the
other, in pairs, alternating which side goes first (A B, B A, A B, ...), so that a slow spell of the
machine hits both sides alike. Each child reports the median step time over its timing rounds; the
ratio is the median over pairs of with/without (lower is better; target <= 1.02).

Case (value = step time with ditorch, baseline = without, both medians over the children):

* ``w1_train_step_import``: one W1 training step (a 2-layer Llama, hidden 128, vocab 1000; AdamW lr=1e-3;
  input ids (2, 64)) on dipu in milliseconds: forward with labels, zero_grad, backward, optimizer step,
  loss.item().

Writes one JSON file in the project's benchmark format (see benchmarks/README.md) and prints one line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import environment, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "import.json"
SIDES = ("without", "with")


# -- child: one side, one process ---------------------------------------------------------------------

def child(side: str, rounds: int, steps: int, warmup: int, module: str = "ditorch", device: str = "dipu") -> dict:
    """Time the W1 step on ``device`` in this process; ``side == "with"`` imports ``module`` (ditorch) before
    the model. The benchmark suite reuses this with ``module="op_tools"`` on both devices."""
    import importlib

    import transformers  # noqa: F401  (imported on both sides before the clock matters)

    import torch_dipu  # noqa: F401  (both sides: the dipu device itself is not what is measured)

    import_ms = None
    if side == "with":
        start = time.perf_counter()
        importlib.import_module(module)
        import_ms = (time.perf_counter() - start) * 1e3

    step = w1_step(device)

    for _ in range(warmup):
        step()
    times = []
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(steps):
                loss = step()
            times.append((time.perf_counter() - start) / steps)
        finally:
            gc.enable()
    return {"side": side, "step_s": statistics.median(times), "times": times, "loss": loss, "import_ms": import_ms}


# -- parent: interleaved pairs of children ------------------------------------------------------------

def run_child(side: str, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DITORCH_", "DROPLET_FAULTS"))}
    env["DITORCH_QUIET"] = "1"
    command = [sys.executable, __file__, "--child", side, "--rounds", str(args.rounds),
               "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--module", getattr(args, "module", "ditorch"), "--device", getattr(args, "device", "dipu")]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the {side!r} child failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict[str, list[dict]]:
    samples: dict[str, list[dict]] = {side: [] for side in SIDES}
    for pair in range(args.pairs):
        for side in SIDES if pair % 2 == 0 else reversed(SIDES):
            samples[side].append(run_child(side, args))
        print(f"pair {pair + 1}/{args.pairs}: without {samples['without'][-1]['step_s'] * 1e3:.3f} ms, "
              f"with {samples['with'][-1]['step_s'] * 1e3:.3f} ms", file=sys.stderr)
    return samples


def result(samples: dict[str, list[dict]]) -> dict:
    without = [s["step_s"] * 1e3 for s in samples["without"]]
    with_ = [s["step_s"] * 1e3 for s in samples["with"]]
    ratios = [w / wo for w, wo in zip(with_, without, strict=True)]
    losses = {round(s["loss"], 6) for side in SIDES for s in samples[side]}
    return {
        "case": "w1_train_step_import",
        "value": round(statistics.median(with_), 4),
        "baseline": round(statistics.median(without), 4),
        # median of per-pair ratios: the two children of a pair run back to back
        "ratio": round(statistics.median(ratios), 4),
        "unit": "ms",
        "spread": {  # min/max of the per-child medians and of the per-pair ratios, for judging the noise
            "with": [round(min(with_), 4), round(max(with_), 4)],
            "without": [round(min(without), 4), round(max(without), 4)],
            "ratio": [round(min(ratios), 4), round(max(ratios), 4)],
        },
        "pairs": len(ratios),
        "ditorch_import_ms": round(statistics.median(s["import_ms"] for s in samples["with"]), 2),
        "same_final_loss": len(losses) == 1,  # the step is deterministic: ditorch must not change it
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the W1 step without and with `import ditorch` "
                                                 "(see benchmarks/README.md).")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output file (default {DEFAULT_OUT})")
    parser.add_argument("--pairs", type=int, default=10, help="pairs of child processes (default 10)")
    parser.add_argument("--rounds", type=int, default=10, help="timing rounds per child (default 10)")
    parser.add_argument("--steps", type=int, default=3, help="steps per timing round (default 3)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps per child (default 3)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--module", default="ditorch", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="dipu", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.steps, args.warmup, args.module, args.device)))
        return 0
    row = result(measure(args))
    report = {"name": "import", "unit": "ms", "results": [row], "env": environment()}
    write_json(args.out, report)
    print(f"{row['case']}: with ditorch {row['value']:.3f} ms, without {row['baseline']:.3f} ms, "
          f"ratio {row['ratio']:.3f} (target <= 1.02); import ditorch {row['ditorch_import_ms']:.1f} ms")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
