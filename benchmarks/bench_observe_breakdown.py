"""Where OpObserve's time goes on W1/dipu: the engine, the backward hooks and the formatting, measured apart.

    python benchmarks/bench_observe_breakdown.py [--out FILE] [--rounds N] [--steps N]

One process builds W1 on dipu once and runs it, in interleaved rounds, plain and under five kinds:

* ``empty_mode``: an empty ``TorchFunctionMode`` (the floor of any op-intercepting tool);
* ``nop_observer``: the engine with an ``after``-only tool that does nothing (the engine's own path);
* ``nop_observer_backward``: the same tool also taking part in ``Phase.BACKWARD`` (every autograd node of
  every call hooked, gradient metadata recorded);
* ``observe_no_backward``: ``OpObserve(file=..., backward=False)`` (the engine plus formatting lines);
* ``observe_to_file``: ``OpObserve(file=...)``.

``value`` is the median ms per step under the kind, ``baseline`` the plain median, ``ratio`` their
quotient. Differences between rows give each part's cost in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import empty_mode, environment, nop_observer, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "observe_breakdown.json"
KINDS = ("plain", "empty_mode", "nop_observer", "nop_observer_backward", "observe_no_backward", "observe_to_file")


def _tool(kind: str, workdir: Path) -> object:
    from op_tools import OpObserve

    if kind == "plain":
        return contextlib.nullcontext()
    if kind == "empty_mode":
        return empty_mode()
    if kind.startswith("nop_observer"):
        return nop_observer("dipu", backward=kind.endswith("backward"))
    return OpObserve(file=workdir / "observe.log", device="dipu", backward=kind == "observe_to_file")


def measure(rounds: int = 10, steps: int = 4) -> list[dict]:
    """One row per kind but plain (see the module docstring)."""
    import torch_dipu  # noqa: F401

    step = w1_step("dipu")
    step()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="bench_observe_breakdown-") as tmp:
        for r in range(rounds):
            for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:
                with _tool(kind, Path(tmp)):
                    start = time.perf_counter()
                    for _ in range(steps):
                        step()
                    times[kind].append((time.perf_counter() - start) / steps)
    base = statistics.median(times["plain"]) * 1e3
    return [{"case": f"w1_step_{kind}_dipu", "unit": "ms", "value": round(statistics.median(times[kind]) * 1e3, 3),
             "baseline": round(base, 3), "ratio": round(statistics.median(times[kind]) * 1e3 / base, 3)}
            for kind in KINDS[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    rows = measure(args.rounds, args.steps)
    write_json(args.out, {"name": "observe_breakdown", "unit": "ms", "results": rows,
                          "env": {**environment(), "rounds": args.rounds, "steps_per_round": args.steps}})
    for row in rows:
        print(f"{row['case']}: {row['value']:.2f} ms vs plain {row['baseline']:.2f} ms, ratio {row['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
