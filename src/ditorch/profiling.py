"""Profile an unmodified script: ``ditorch profile [options] -- script.py args``.

The script runs as with ``ditorch run`` (same argv, ``sys.path``, exit status and exceptions; the same
checking-tool options may be combined) under ``torch.profiler.profile(activities=[CPU])``. The op tools'
engine is active for the whole script (:class:`op_tools.profiler_ranges.OpProfilerRanges`), so every API
call appears as a range named after it (``torch.nn.functional.linear``) with its ``aten::`` ops inside, and on
the dipu device each kernel appears under its DIOPI function name (``diopiMm``) or as
``fallback::aten.<op>``.

When the script ends (also by an exception or ``sys.exit``) the trace is written as Chrome/Perfetto JSON
(open it in https://ui.perfetto.dev or chrome://tracing): to ``--out``, else to
``ditorch_profile_<time>[_rank<R>].json`` in ``$OP_TOOLS_RESULTS_DIR`` when that is set, else in the current
directory. Then the summary table (``key_averages().table``) and the trace's path are printed to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ditorch import run as run_command
from ditorch.arguments import int_at_least

SORT_KEYS = ("self_cpu_time_total", "cpu_time_total")
DEFAULT_TOP = 25
#: Exit status when the script succeeded but the trace could not be written.
EXIT_NO_TRACE = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Configure the ``profile`` subcommand's parser: profiler options, ``ditorch run``'s tools, the script."""
    group = parser.add_argument_group("profiler")
    group.add_argument("--out", metavar="FILE", default=None,
                       help="where to write the Chrome/Perfetto trace (default ditorch_profile_<time>.json in "
                            "$OP_TOOLS_RESULTS_DIR if set, else in the current directory)")
    group.add_argument("--top", metavar="N", type=int_at_least(1), default=DEFAULT_TOP,
                       help=f"rows of the summary table (default {DEFAULT_TOP})")
    group.add_argument("--sort", choices=SORT_KEYS, default=SORT_KEYS[0],
                       help=f"order of the summary table (default {SORT_KEYS[0]})")
    run_command.add_arguments(parser)


def default_trace_path() -> Path:
    """``ditorch_profile_<time>[_rank<R>].json`` in ``$OP_TOOLS_RESULTS_DIR`` or the current directory; a
    name already taken gets ``-1``, ``-2``, ... appended."""
    folder = Path(os.environ.get("OP_TOOLS_RESULTS_DIR") or ".")
    rank = os.environ.get("RANK")
    stem = "ditorch_profile_" + time.strftime("%Y-%m-%d--%H-%M-%S") + (f"_rank{rank}" if rank else "")
    path = folder / f"{stem}.json"
    n = 0
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.json"
    return path


@contextlib.contextmanager
def _profiler(started: list) -> Iterator[None]:
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False) as prof:
        started.append(prof)
        yield


def _report(prof: object, path: Path, sort: str, top: int) -> bool:
    """Write the trace, print the table and the trace's path; False when the trace could not be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))
    except OSError as exc:
        print(f"ditorch profile: cannot write the trace to {path}: {exc}", file=sys.stderr, flush=True)
        return False
    table = prof.key_averages().table(sort_by=sort, row_limit=top)
    print(table, file=sys.stderr)
    print(f"ditorch profile: trace written to {path} (open in https://ui.perfetto.dev or chrome://tracing)",
          file=sys.stderr, flush=True)
    return True


def handle(args: argparse.Namespace) -> int:
    """The ``profile`` subcommand's handler."""
    prepared = run_command.script_and_tools(args, "profile")
    if isinstance(prepared, int):
        return prepared
    command, tools = prepared
    from op_tools.profiler_ranges import OpProfilerRanges

    # Chosen before the script runs (its start time; a script that changes directory does not move it).
    path = Path(args.out).absolute() if args.out else default_trace_path().absolute()
    started: list = []
    written = True
    try:
        # The profiler starts last and stops first: the tools' setup and summaries are not in the trace.
        status = run_command.run_script(command[0], command[1:], [OpProfilerRanges(), *tools, _profiler(started)])
    finally:  # also when the script raised or called sys.exit (which then propagate)
        if started:
            written = _report(started[0], path, args.sort, args.top)
    return status if written or status else EXIT_NO_TRACE
