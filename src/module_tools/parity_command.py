"""``ditorch parity [--steps N] [--out DIR] [--stats-only] [--reference DIR] -- script.py args``: run a script on
the CPU and on the device with the same seeds and random numbers, and name the first module where they part."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from op_tools.config import int_at_least

from .parity import DEFAULT_STEPS, SEED

__all__ = ["add_arguments", "handle", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the command's arguments to ``p`` (every ``ditorch`` subcommand plugs in this way)."""
    p.add_argument("--steps", type=int_at_least(1), default=DEFAULT_STEPS,
                   help=f"steps to run and compare; each run ends at the N-th optimizer.step() (default "
                        f"{DEFAULT_STEPS})")
    p.add_argument("--out", default="parity", help="output folder: ref/, test/, report.html, report.json "
                                                   "(default parity)")
    p.add_argument("--stats-only", action="store_true", help="dump and compare statistics only")
    p.add_argument("--reference", metavar="DIR", default=None,
                   help="compare with this reference dump (ref/ of an earlier parity run) instead of running "
                        "the reference again")
    p.add_argument("--fixed-input", action="store_true",
                   help="the device run also replays each call on the reference run's inputs, to name each "
                        "module's own error (costs a second run of every call)")
    p.add_argument("script", nargs="?", default=None,
                   help=f"the Python script to run (both runs seeded with {SEED} first)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


def main(argv: Sequence[str] | None = None) -> int:
    """``ditorch parity``: see :func:`handle`."""
    parser = argparse.ArgumentParser(prog="ditorch parity",
                                     description="Does the script train the same on this device as on the CPU?")
    add_arguments(parser)
    return handle(parser.parse_args(list(argv) if argv is not None else None))


def handle(args: argparse.Namespace) -> int:
    """Print "no divergence in N steps" (exit 0) or the first divergence (exit 1) and the reports' paths;
    exit 2 when a run fails (naming it, with the end of its stderr) or nothing aligns."""
    from .parity import run_parity

    if args.script is None:
        print("ditorch parity: error: no script given (usage: ditorch parity [options] -- script.py [args ...])",
              file=sys.stderr)
        return 2
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    result = run_parity(args.script, script_args, steps=args.steps, out=args.out, stats_only=args.stats_only,
                        reference=args.reference, fixed_input=args.fixed_input,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    for line in result.lines:
        print(line, file=sys.stdout if result.status < 2 else sys.stderr)
    return result.status
