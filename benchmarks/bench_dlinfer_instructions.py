"""Instructions executed by stock ``generate()`` and by the dlinfer adaptor, per decode step and per prefill, counted
by valgrind's callgrind: a measure of work done that does not move with the machine's load.

    python benchmarks/bench_dlinfer_instructions.py [--out FILE] [--families llama,...] [--generations 2]

Wall-clock ratios on shared machines move by several percent from run to run (benchmarks/README.md); an
instruction count repeats within about 0.2%. It does not see memory stalls or threads (the children run torch on
one thread), so it complements ``bench_dlinfer.py``, never replaces it. For each config and side, two child
processes run under ``valgrind --tool=callgrind --instr-atstart=no``: each builds the model as ``bench_dlinfer``
does (dlinfer installed once, before the warm-up), warms up with three short ``generate()`` calls, switches
counting on (``callgrind_control -i on``), runs ``--generations`` greedy ``generate()`` calls of 2 (prefill and
one decode step) or of ``NEW_TOKENS`` new tokens, and switches it off. Per case: ``decode`` = instructions per
decode step, ``(I(long) - I(2)) / (generations * (NEW_TOKENS - 2))``; ``prefill`` = instructions of a prefill and
its first decode step, ``I(2) / generations``; ``ratio`` = dlinfer / stock (< 1: the adaptor executes fewer).
Needs valgrind (``apt install valgrind``); about 80 s per config on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import callgrind_count, counting, finish, missing_callgrind  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dlinfer_instructions.json"
NEW_TOKENS = 32


def child(family: str, use_dlinfer: bool, generations: int, new_tokens: int) -> None:
    """Run inside callgrind: build, warm up, then count ``generations`` generate() calls."""
    os.environ.setdefault("DITORCH_DISABLE_MOCK", "1")
    os.environ.setdefault("DITORCH_QUIET", "1")
    import torch

    import bench_dlinfer

    torch.set_num_threads(1)
    model = bench_dlinfer.build(family)
    batch = bench_dlinfer.prompts()
    if use_dlinfer:
        from dlinfer.framework import transformers as dlinfer_tf

        dlinfer_tf.install(model, block_size=bench_dlinfer.BLOCK_SIZE)

    def generate(tokens: int) -> None:
        with torch.no_grad():
            model.generate(**batch, max_new_tokens=tokens, do_sample=False, pad_token_id=0)

    for _ in range(3):
        generate(4)
    with counting():
        for _ in range(generations):
            generate(new_tokens)


def count(family: str, use_dlinfer: bool, generations: int, new_tokens: int) -> int:
    """Instructions counted in one child process."""
    return callgrind_count(__file__, ["--child", family, "1" if use_dlinfer else "0", str(generations),
                                      str(new_tokens)])


def bench_family(family: str, generations: int) -> list[dict[str, Any]]:
    """The prefill and decode rows of one config (four callgrind runs, two at a time)."""
    jobs = [(use, tokens) for use in (False, True) for tokens in (2, NEW_TOKENS)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count(family, job[0], generations, job[1]), jobs),
                          strict=True))
    rows = []
    for phase in ("prefill", "decode"):
        values = {}
        for use in (False, True):
            short, long = counts[(use, 2)], counts[(use, NEW_TOKENS)]
            values[use] = (short / generations if phase == "prefill"
                           else (long - short) / (generations * (NEW_TOKENS - 2)))
        rows.append({"case": f"{family}_{phase}", "value": round(values[True]), "baseline": round(values[False]),
                     "ratio": round(values[True] / values[False], 4), "unit": "instructions",
                     "counts": {f"{'dlinfer' if use else 'stock'}_{tokens}": n for (use, tokens), n in counts.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        family, use, generations, tokens = argv[1:5]
        child(family, use == "1", int(generations), int(tokens))
        return 0
    import bench_dlinfer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--families", default=",".join(bench_dlinfer.FAMILIES))
    parser.add_argument("--generations", type=int, default=2, help="generate() calls counted per run (default 2)")
    args = parser.parse_args(argv)
    missing = missing_callgrind()
    if missing:
        parser.error(f"needs {' and '.join(missing)} (apt install valgrind)")
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(bench_dlinfer.FAMILIES))
    if unknown:
        parser.error(f"--families: unknown {', '.join(unknown)} (known: {', '.join(bench_dlinfer.FAMILIES)})")
    started = time.perf_counter()
    results = []
    for family in families:
        for row in bench_family(family, args.generations):
            results.append(row)
            print(f"{row['case']:>18}: dlinfer {row['value']:>11,} stock {row['baseline']:>11,} instructions,"
                  f" ratio {row['ratio']:.3f}")
    return finish(args.out, "dlinfer_generate_instructions", "instructions", results, started,
                  ["benchmarks/bench_dlinfer_instructions.py", *argv], torch_threads=1, generations=args.generations,
                  new_tokens=NEW_TOKENS, ratio="dlinfer instructions / stock instructions")


if __name__ == "__main__":
    sys.exit(main())
