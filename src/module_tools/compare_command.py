"""``ditorch compare-runs REF TEST [--fp64 DUMP] [--json FILE] [--html FILE]``: compare two module dumps."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``compare-runs`` to ``parser`` (every ``ditorch`` subcommand plugs in this way)."""
    parser.add_argument("ref", help="the reference dump (a ModuleDump folder or one rank<r> folder)")
    parser.add_argument("test", help="the dump under test")
    parser.add_argument("--fp64", metavar="DUMP", default=None, help="a float64 dump of the same run: the noise floor")
    parser.add_argument("--json", metavar="FILE", default=None, help="write the full comparison as JSON")
    parser.add_argument("--html", metavar="FILE", default=None, help="write a self-contained HTML report")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m module_tools.compare_command`` / ``ditorch compare-runs``: see :func:`handle`."""
    parser = argparse.ArgumentParser(prog="ditorch compare-runs",
                                     description="compare two module dumps and name the first divergence")
    add_arguments(parser)
    return handle(parser.parse_args(argv))


def handle(args: argparse.Namespace) -> int:
    """Print "no divergence in N steps" (exit 0) or the first divergence lines (exit 1); exit 2 with one line
    when a dump is missing or damaged or nothing aligns."""
    from .compare import compare_runs

    try:
        result = compare_runs(args.ref, args.test, fp64=args.fp64)
    except ValueError as exc:  # DumpError is a ValueError too
        print(f"ditorch compare-runs: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(result.summary())
    counts = result.alignment.counts()
    unaligned = len(result.alignment.unaligned_ref) + len(result.alignment.unaligned_test)
    print(f"aligned modules: {', '.join(f'{n} {how}' for how, n in counts.items())}"
          + (f"; {unaligned} not aligned" if unaligned else ""))
    if args.json:
        result.write_json(args.json)
        print(f"JSON: {args.json}")
    if args.html:
        result.write_html(args.html)
        print(f"HTML report: {args.html}")
    return 1 if result.diverged else 0
