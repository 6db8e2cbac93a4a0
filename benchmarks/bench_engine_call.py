"""Benchmark the op tools' engine cost per intercepted call, as a ratio to an empty ``TorchFunctionMode``.

    python benchmarks/bench_engine_call.py [--out FILE] [--calls N] [--rounds N]

The same calls (``torch.add`` of two small CPU tensors, no autograd) run plain, under an empty
``TorchFunctionMode`` (the floor: what any op-intercepting tool pays for the interception itself), and
under the engine with one observation tool acting on every call (the tools are told to act on CPU calls).
Rounds interleave the kinds; each value is the median over rounds of the seconds per call. The cost of a
kind is its time minus plain; ``ratio`` is that cost over the empty mode's cost (target: <= 2 for the
engine with a tool that does nothing with the call).

Cases (value and baseline in microseconds per call; baseline = the empty mode's cost):

* ``engine_call_nop_observer``: an ``after``-only tool whose ``after`` returns at once: the engine's own
  path for an observation tool (op name lookup, plan, tensor collection, the call record, the after phase).
* ``engine_call_observe_to_file``: ``OpObserve(file=...)``: the engine plus formatting and writing one line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import empty_mode, environment, nop_observer, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "engine_call.json"
TARGET = 2.0
KINDS = ("plain", "empty_mode", "nop_observer", "observe_to_file")


def _tool(kind: str, workdir: Path) -> object:
    import contextlib

    from op_tools import OpObserve

    if kind == "plain":
        return contextlib.nullcontext()
    if kind == "empty_mode":
        return empty_mode()
    if kind == "nop_observer":
        return nop_observer("cpu")
    return OpObserve(file=workdir / "observe.log", device="cpu", backward=False)


def measure(calls: int = 20_000, rounds: int = 7) -> list[dict]:
    """The two rows (see the module docstring), measured in interleaved rounds in this process."""
    import torch

    a, b = torch.ones(4), torch.ones(4)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="bench_engine_call-") as tmp:
        for r in range(rounds + 1):  # round 0 warms up
            order = KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]
            for kind in order:
                with _tool(kind, Path(tmp)):
                    start = time.perf_counter()
                    for _ in range(calls):
                        torch.add(a, b)
                    elapsed = time.perf_counter() - start
                if r:
                    times[kind].append(elapsed / calls)
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    floor = us["empty_mode"] - us["plain"]
    rows = []
    for kind in ("nop_observer", "observe_to_file"):
        cost = us[kind] - us["plain"]
        rows.append({"case": f"engine_call_{kind}", "unit": "us", "value": round(cost, 3),
                     "baseline": round(floor, 3), "ratio": round(cost / floor, 3) if floor > 0 else None,
                     "target_ratio": TARGET if kind == "nop_observer" else None,
                     "plain_us": round(us["plain"], 3), "calls": calls, "rounds": rounds})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    rows = measure(args.calls, args.rounds)
    write_json(args.out, {"name": "engine_call", "unit": "us", "results": rows,
                          "env": {**environment(), "calls": args.calls, "rounds": args.rounds}})
    for row in rows:
        print(f"{row['case']}: {row['value']:.2f} us per call over plain vs empty TorchFunctionMode "
              f"{row['baseline']:.2f} us: ratio {row['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
