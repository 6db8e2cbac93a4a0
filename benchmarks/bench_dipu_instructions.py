"""Instructions executed per dipu operator and per W1 training step, beside the CPU and the floor of a Python device,
counted by valgrind's callgrind: ``bench_dipu.py``'s figures in a measure that does not move with the machine's load.

    python benchmarks/bench_dipu_instructions.py [--out FILE] [--calls 2000] [--steps 2]

Wall-clock timings of a 2-core shared machine move by several percent between runs (benchmarks/README.md); these
counts repeat within a fraction of a percent. They do not see cache misses, branch mispredictions or threads (the
children run torch on one thread), where Python code fares worse than kernels, so a ratio of instructions is
smaller than the same ratio of wall time: they complement ``bench_dipu.py``, never replace it. Sides: ``cpu`` (plain
tensors), ``nop_subclass`` (benchmarks/dispatch_floors.py: a do-nothing wrapper subclass) and ``dipu``. For each side
and case, two child processes run under callgrind, counting a short and a long run after a warm-up; the difference
divided by the extra calls is the per-call count (start-up and warm-up cancel out).

* ``add_instructions``: ``x.add(x)`` on a 4x4 tensor, ``--calls`` more calls in the long run. value = dipu's
  instructions per call over the CPU's, ``floor_nop_subclass`` = the floor's over the CPU's,
  ``floor_ratio_nop_subclass`` = their ratio (bench_dipu's ``dispatch_overhead_us`` target, <= 1.5, counted).
* ``w1_train_step_instructions``: one W1 step (bench_common.w1_step), ``--steps`` more steps in the long run. value =
  dipu's, baseline = the CPU's, ratio = dipu / CPU; ``floor_nop_subclass`` and ``floor_ratio_nop_subclass`` = dipu /
  floor.

Needs valgrind (``apt install valgrind``); about 6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import callgrind_count, counting, finish, missing_callgrind  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dipu_instructions.json"
SIDES = ("cpu", "nop_subclass", "dipu")
SHORT = {"add": 200, "w1": 1}  # calls of the short run; the long run makes --calls / --steps more


def child(case: str, side: str, n: int) -> None:
    """Run inside callgrind: warm up, then count ``n`` calls of ``case`` on ``side``."""
    import torch

    import dispatch_floors
    import torch_dipu  # noqa: F401  (registers the dipu device)
    from bench_common import w1_step

    torch.set_num_threads(1)
    if case == "add":
        base = torch.randn(4, 4)
        x = {"cpu": base, "nop_subclass": dispatch_floors.wrap(base.clone()), "dipu": base.to("dipu")}[side]

        def call() -> object:
            return x.add(x)
        warmup = 500
    else:
        call = dispatch_floors.w1_step_nop() if side == "nop_subclass" else w1_step(side)
        warmup = 3
    for _ in range(warmup):
        call()
    gc.collect()
    gc.disable()
    with counting():
        for _ in range(n):
            call()


def count(case: str, side: str, n: int) -> int:
    """Instructions counted in one child process."""
    return callgrind_count(__file__, ["--child", case, side, str(n)])


def rows(case: str, extra: int, counter: Any = count) -> dict[str, Any]:
    """One result row from the short and long runs of every side (two callgrind runs at a time)."""
    jobs = [(side, n) for side in SIDES for n in (SHORT[case], SHORT[case] + extra)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: counter(case, *job), jobs), strict=True))
    per = {side: (counts[(side, SHORT[case] + extra)] - counts[(side, SHORT[case])]) / extra for side in SIDES}
    raw = {f"{side}_{n}": c for (side, n), c in counts.items()}
    if case == "add":
        dipu, floor = per["dipu"] - per["cpu"], per["nop_subclass"] - per["cpu"]
        return {"case": "add_instructions", "value": round(dipu), "baseline": round(per["cpu"]),
                "ratio": round(per["dipu"] / per["cpu"], 3), "unit": "instructions",
                "floor_nop_subclass": round(floor), "floor_ratio_nop_subclass": round(dipu / floor, 3),
                "per_call": {k: round(v) for k, v in per.items()}, "counts": raw}
    return {"case": "w1_train_step_instructions", "value": round(per["dipu"]), "baseline": round(per["cpu"]),
            "ratio": round(per["dipu"] / per["cpu"], 3), "unit": "instructions",
            "floor_nop_subclass": round(per["nop_subclass"]),
            "floor_ratio_nop_subclass": round(per["dipu"] / per["nop_subclass"], 3), "counts": raw}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--calls", type=int, default=2000, help="extra add calls of the long run (default 2000)")
    parser.add_argument("--steps", type=int, default=2, help="extra W1 steps of the long run (default 2)")
    args = parser.parse_args(argv)
    missing = missing_callgrind()
    if missing:
        parser.error(f"needs {' and '.join(missing)} (apt install valgrind)")
    started = time.perf_counter()
    results = [rows("add", args.calls), rows("w1", args.steps)]
    for row in results:
        print(f"{row['case']:>28}: dipu {row['value']:>12,} cpu {row['baseline']:>12,} nop subclass "
              f"{row['floor_nop_subclass']:>12,}  dipu/floor {row['floor_ratio_nop_subclass']:.3f}")
    return finish(args.out, "dipu_instructions", "instructions", results, started,
                  ["benchmarks/bench_dipu_instructions.py", *argv], torch_threads=1, calls=args.calls, steps=args.steps)


if __name__ == "__main__":
    sys.exit(main())
