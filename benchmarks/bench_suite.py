"""The benchmark suite: W1 plain and under every op_tools tool, on the CPU and on dipu, in one run.

    python -m benchmarks [--out-dir DIR] [--quick] [--rounds N] [--steps N] [--pairs N]
    python benchmarks/bench_suite.py ...               # the same

Tool rows. One process builds W1 (a 2-layer Llama, hidden 128, vocab 1000; AdamW lr=1e-3; input ids (2, 64))
once per (device, kind) from the same seed, warms each up with one plain step, then runs ``--rounds``
rounds; in every round each device runs ``--steps`` steps under every kind (plain, OpObserve to a file,
OpCapture, OpCapture stats, OpAutoCompare, OpOverflowCheck, OpFallback(".*"), OpDtypeCast, OpTimeMeasure
event and sync), the order of the kinds rotating from round to round, so a slow spell of the machine hits
all of them alike. A round's time runs from starting the tool to the end of its ``stop()``. ``value`` is
the median ms per step under the tool, ``baseline`` the median of plain on the same device, ``ratio``
their quotient. A tool that cannot be built or run (OpTimeMeasure missing, a mode the device lacks) gets
a row with ``value`` null and a ``note``.

Inactive rows ("tools imported but none active"): ``import op_tools`` cannot be undone, so the two sides run
in child processes identical but for that line (bench_import.py's children), in pairs alternating which
side goes first, each child timing many short rounds; ``ratio`` is the median over pairs of with/without.

Writes ``suite.json`` (the project's benchmark format) and ``suite.md`` (a table with the date and the
machine) into ``--out-dir`` (default benchmarks/results) and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench_engine_call
import bench_import
from bench_common import TARGETS, environment, timed_round, w1_step, write_json

DEFAULT_OUT_DIR = Path(__file__).resolve().parent / "results"
DEVICES = ("cpu", "dipu")
KINDS = ["plain", "observe_to_file", "capture", "capture_stats", "autocompare", "overflow_check", "fallback",
         "dtype_cast", "time_measure_event", "time_measure_sync"]
INACTIVE_TARGET = 1.02
#: Tools that only watch: their losses must be bitwise those of plain (the others may change the numbers).
WATCHES = {"observe_to_file", "capture", "capture_stats", "autocompare", "overflow_check", "time_measure_event",
           "time_measure_sync"}


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def tool_rows(rounds: int, steps: int) -> list[dict]:
    """The rows of every (device, tool) pair, measured in interleaved rounds in this process."""
    steps_of: dict[tuple[str, str], object] = {}
    notes: dict[tuple[str, str], str] = {}
    for device in DEVICES:
        for kind in KINDS:
            steps_of[device, kind] = w1_step(device)
            steps_of[device, kind]()  # warm-up (first-call costs, caches) outside the timed rounds
    times = {key: [] for key in steps_of}
    losses = {key: [] for key in steps_of}
    written = {key: [] for key in steps_of}
    lines = {key: [] for key in steps_of}
    with tempfile.TemporaryDirectory(prefix="bench_suite-") as tmp:
        for r in range(rounds):
            for device in DEVICES:
                for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:
                    key = (device, kind)
                    if key in notes:
                        continue
                    try:
                        t, ls, nbytes, nlines = timed_round(kind, steps_of[key], steps, Path(tmp), device)
                    except Exception as exc:  # e.g. OpTimeMeasure not there yet, or a mode the device lacks
                        notes[key] = f"skipped: {type(exc).__name__}: {exc}".splitlines()[0][:200]
                        continue
                    times[key].append(t)
                    losses[key].extend(ls)
                    written[key].append(nbytes)
                    lines[key].append(nlines)
    rows = []
    for device in DEVICES:
        base = _ms(times[device, "plain"])
        for kind in KINDS[1:]:
            key = (device, kind)
            row = {"case": f"w1_step_{kind}_{device}", "device": device, "tool": kind, "unit": "ms",
                   "baseline": round(base, 3), "target_ratio": TARGETS[kind]}
            if key in notes or not times[key]:
                row.update(value=None, ratio=None, met=None, note=notes.get(key, "skipped: no round ran"))
            else:
                value = _ms(times[key])
                row.update(
                    value=round(value, 3), ratio=round(value / base, 3), met=value / base <= TARGETS[kind],
                    bytes_per_step=int(statistics.median(written[key]) / steps),
                    console_lines_per_step=statistics.median(lines[key]) / steps,
                    losses_bitwise_equal_to_plain=losses[key] == losses[device, "plain"][:len(losses[key])],
                    losses_must_be_equal=kind in WATCHES,
                    spread={kind: [round(min(times[key]) * 1e3, 3), round(max(times[key]) * 1e3, 3)],
                            "plain": [round(min(times[device, "plain"]) * 1e3, 3),
                                      round(max(times[device, "plain"]) * 1e3, 3)]})
            rows.append(row)
    return rows


def inactive_rows(pairs: int, rounds: int, steps: int, warmup: int) -> list[dict]:
    """"Tools imported but none active": W1 in child processes without and with ``import op_tools``."""
    rows = []
    samples = {device: {side: [] for side in bench_import.SIDES} for device in DEVICES}
    for pair in range(pairs):
        for device in DEVICES:
            args = argparse.Namespace(rounds=rounds, steps=steps, warmup=warmup, module="op_tools", device=device)
            for side in bench_import.SIDES if pair % 2 == 0 else reversed(bench_import.SIDES):
                samples[device][side].append(bench_import.run_child(side, args))
        print(f"inactive: pair {pair + 1}/{pairs} done", file=sys.stderr)
    for device in DEVICES:
        row = bench_import.result(samples[device])
        import_ms = row.pop("ditorch_import_ms")
        row.update(case=f"w1_step_inactive_{device}", device=device, tool="inactive", target_ratio=INACTIVE_TARGET,
                   met=row["ratio"] <= INACTIVE_TARGET, op_tools_import_ms=import_ms,
                   child_rounds=rounds, child_steps_per_round=steps)
        rows.append(row)
    return rows


def engine_call_rows(calls: int, rounds: int) -> list[dict]:
    """The engine's cost per intercepted call over an empty TorchFunctionMode's (bench_engine_call.py)."""
    rows = bench_engine_call.measure(calls, rounds)
    for row in rows:
        row.update(device="cpu", tool=row["case"],
                   met=None if row["target_ratio"] is None or row["ratio"] is None
                   else row["ratio"] <= row["target_ratio"])
    return rows


def markdown(payload: dict, command: str) -> str:
    env = payload["env"]
    out = [
        "# op_tools benchmark suite",
        "",
        f"Measured {env['timestamp']} on {env['platform']} ({env['machine']}, cpu_count {env['cpu_count']}, "
        f"torch threads {env['torch_threads']}); torch {env['torch']}, dipu vendor {env['dipu_vendor']}, "
        f"commit {(env['git_commit'] or 'unknown')[:12]}.",
        "",
        f"Command: `{command}` (rounds of steps per tool and device: {env['rounds']} x {env['steps_per_round']}; "
        f"inactive: {env['inactive_pairs']} pairs of child processes, each {env['inactive_child_rounds']} x "
        f"{env['inactive_child_steps']}). Ratio: median ms per step under the tool / plain on the same device "
        "(inactive: median over pairs of the child with `import op_tools` / the child without).",
        "",
        "| device | tool | ms/step | plain ms/step | ratio | target | met | losses = plain |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for row in payload["results"]:
        if row["value"] is None:
            out.append(f"| {row['device']} | {row['tool']} | - | {row['baseline']:.2f} | - | "
                       f"<= {row['target_ratio']:g} | - | {row['note']} |")
            continue
        if row["tool"].startswith("engine_call_"):
            target = "-" if row["target_ratio"] is None else f"<= {row['target_ratio']:g}"
            met = "-" if row["met"] is None else ("met" if row["met"] else "**missed**")
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}"  # None: the floor measured no cost
            out.append(f"| {row['device']} | {row['tool']} (us/call over plain; baseline: empty mode) | "
                       f"{row['value']:.2f} | {row['baseline']:.2f} | {ratio} | {target} | {met} | - |")
            continue
        met = "met" if row["met"] else "**missed**"
        equal = row.get("losses_bitwise_equal_to_plain", row.get("same_final_loss"))
        equal_text = "-" if equal is None else ("yes" if equal else "no")
        if equal is False and not row.get("losses_must_be_equal", True):
            equal_text += " (may differ)"
        out.append(f"| {row['device']} | {row['tool']} | {row['value']:.2f} | {row['baseline']:.2f} | "
                   f"{row['ratio']:.3f} | <= {row['target_ratio']:g} | {met} | {equal_text} |")
    return "\n".join(out) + "\n"


def _command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    """The command line that reproduces these numbers (options that differ from the defaults)."""
    if args.quick:
        return "python -m benchmarks --quick"
    parts = ["python -m benchmarks"]
    for name in ("rounds", "steps", "pairs", "inactive_rounds", "inactive_steps"):
        if getattr(args, name) != parser.get_default(name):
            parts.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                        help=f"where suite.json and suite.md go (default {DEFAULT_OUT_DIR})")
    parser.add_argument("--quick", action="store_true",
                        help="1 round of 2 steps, 1 inactive pair of 1 round: checks that it runs, numbers are noise")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per tool and device (default 7)")
    parser.add_argument("--steps", type=int, default=4, help="steps per round (default 4)")
    parser.add_argument("--pairs", type=int, default=8, help="pairs of child processes for inactive (default 8)")
    parser.add_argument("--inactive-rounds", type=int, default=20, help="timing rounds per child (default 20)")
    parser.add_argument("--inactive-steps", type=int, default=2, help="steps per child round (default 2)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.pairs, args.inactive_rounds, args.inactive_steps = 1, 2, 1, 1, 1
    if min(args.rounds, args.steps, args.pairs, args.inactive_rounds, args.inactive_steps) < 1:
        parser.error("every count must be at least 1")

    import torch_dipu  # noqa: F401

    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # tools' own prints do not mix with the table
        rows = tool_rows(args.rounds, args.steps)
    rows += inactive_rows(args.pairs, args.inactive_rounds, args.inactive_steps, warmup=1 if args.quick else 3)
    rows.sort(key=lambda row: (DEVICES.index(row["device"]), row["tool"] != "inactive"))
    rows += engine_call_rows(2_000 if args.quick else 20_000, 1 if args.quick else args.rounds)
    env = {**environment(), "rounds": args.rounds, "steps_per_round": args.steps, "inactive_pairs": args.pairs,
           "inactive_child_rounds": args.inactive_rounds, "inactive_child_steps": args.inactive_steps,
           "wall_s": round(time.perf_counter() - start, 1)}
    payload = {"name": "suite", "unit": "ms", "results": rows, "env": env}
    table = markdown(payload, _command(args, parser))
    write_json(args.out_dir / "suite.json", payload)
    (args.out_dir / "suite.md").write_text(table)
    print(table)
    print(f"wrote {args.out_dir / 'suite.json'} and {args.out_dir / 'suite.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
