"""Run an unmodified script with ditorch active: ``ditorch run [options] -- script.py args``.

``python -m ditorch script.py args`` is the same. ditorch is imported first (which activates the vendor
adapter and the ``cuda`` mocking), then the script runs as ``__main__`` the way ``python script.py``
would run it: ``sys.argv`` is the script's argv and the script's directory comes first on ``sys.path``.
The script's exit status and exceptions propagate unchanged (``sys.exit(3)`` exits with 3, an uncaught
exception prints its traceback and exits with 1).

Options before ``--`` belong to ditorch; everything after the script path belongs to the script. The
options switch op_tools' checking tools on for the whole script (op_tools is imported only then):

- ``--autocompare``: :class:`op_tools.OpAutoCompare` (every call on the device checked against the CPU);
- ``--overflow-check``: :class:`op_tools.OpOverflowCheck` (the calls that produce NaN or Inf);
- ``--fallback OPS``: :class:`op_tools.OpFallback` for the comma-separated op regexes (``OP_FALLBACK_LIST``
  syntax);
- ``--dtype-cast DICT``: :class:`op_tools.OpDtypeCast` with the cast table (``OP_DTYPE_CAST_DICT`` syntax,
  ``torch.float16->torch.float32,...``).

The tools are built after ``import ditorch``, so they watch the accelerator the adapter activated, and
each tool's environment variables still apply (``OP_AUTOCOMPARE_DISABLE_LIST``, ``OP_TOOLS_RESULTS_DIR``,
...). They start just before the script runs and stop after it, also when it raises or calls
``sys.exit``, so their summaries are always printed.

Under torchrun each worker runs ``ditorch run`` as its module (``python -m torch.distributed.run
--standalone --nproc_per_node 2 -m ditorch run --autocompare -- script.py``): every rank runs the tools on its
own calls, writes ``<tool>/<run>/rank<r>/`` of one ``<run>`` shared by the launch and prefixes its console
lines with ``[rank<r>]`` (docs/op_tools.md, "Multi-process runs").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

#: Exit status when the script cannot be opened (the same as ``python missing.py``).
EXIT_NO_SCRIPT = 2
#: Exit status when a checking tool cannot be set up (a malformed tool environment variable).
EXIT_BAD_TOOL = 2


def _op_list(text: str) -> str:
    """``--fallback``'s value: comma-separated whole-name regular expressions, at least one."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise argparse.ArgumentTypeError("expected at least one op name or regular expression "
                                         "(example: torch.nn.functional.linear,torch.matmul)")
    from diopi.env import compile_op_list

    try:
        compile_op_list(entries, "--fallback")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--fallback: entry ")) from None
    return ",".join(entries)


def _cast_table(text: str) -> str:
    """``--dtype-cast``'s value, checked with op_tools' own parser (imported only when the option is given)."""
    from op_tools.dtype_cast import parse_cast

    try:
        table = parse_cast(text, "--dtype-cast")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--dtype-cast: ")) from None
    if not table:
        raise argparse.ArgumentTypeError("the table casts nothing (example: torch.float16->torch.float32)")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Configure the ``run`` subcommand's parser: the tool options (before ``--``) and the script."""
    tools = parser.add_argument_group(
        "checking tools", "op_tools' tools, active for the whole script; each tool's environment variables "
                          "(OP_<TOOL>_LIST, OP_<TOOL>_DISABLE_LIST, OP_TOOLS_RESULTS_DIR, ...) still apply")
    tools.add_argument("--autocompare", action="store_true",
                       help="check every operator call on the device against the CPU (op_tools.OpAutoCompare); "
                            "results and report.html under $OP_TOOLS_RESULTS_DIR or op_tools_results")
    tools.add_argument("--overflow-check", action="store_true",
                       help="name the operator calls that produce NaN or Inf (op_tools.OpOverflowCheck)")
    tools.add_argument("--fallback", metavar="OPS", type=_op_list, default=None,
                       help="run these ops on the CPU (op_tools.OpFallback): comma-separated whole-name "
                            "regular expressions, as in OP_FALLBACK_LIST (e.g. torch.nn.functional.linear)")
    tools.add_argument("--dtype-cast", metavar="DICT", type=_cast_table, default=None,
                       help="run ops with these dtypes widened (op_tools.OpDtypeCast), as in OP_DTYPE_CAST_DICT "
                            "(e.g. torch.float16->torch.float32,torch.bfloat16->torch.float32)")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- script.py [args ...]",
        help="the script to run and its arguments; '--' separates them from ditorch's options "
             "(optional when the script path does not start with '-')",
    )


def build_tools(args: argparse.Namespace) -> list[AbstractContextManager]:
    """The checking tools the options ask for, in start order (none: op_tools is not imported).

    Observers first, executing tools last: when both ``--dtype-cast`` and ``--fallback`` match a call, the
    tool started last (the fallback) runs it. Call after ``import ditorch`` so the tools watch its device.
    """
    if not (args.autocompare or args.overflow_check or args.fallback or args.dtype_cast):
        return []
    import op_tools

    tools: list[AbstractContextManager] = []
    if args.autocompare:
        tools.append(op_tools.OpAutoCompare())
    if args.overflow_check:
        tools.append(op_tools.OpOverflowCheck())
    if args.dtype_cast:
        tools.append(op_tools.OpDtypeCast(cast=args.dtype_cast))
    if args.fallback:
        tools.append(op_tools.OpFallback(ops=args.fallback))
    return tools


def script_and_tools(args: argparse.Namespace, subcommand: str) -> tuple[list[str], list] | int:
    """The script command (the remainder after ``--``) and the tools its options ask for, or the exit
    status after a one-line error (no script; a malformed ``OP_*`` environment variable)."""
    command = script_command(args)
    problem = script_problem(command, subcommand)
    if problem is not None:
        print(f"ditorch {subcommand}: error: {problem}", file=sys.stderr)
        return EXIT_NO_SCRIPT
    _activate_ditorch()  # the adapter is active before the tools choose their device
    try:
        return command, build_tools(args)
    except ValueError as exc:  # a malformed OP_* environment variable
        print(f"ditorch {subcommand}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_TOOL


def script_command(args: argparse.Namespace) -> list[str]:
    """The script and its arguments: the remainder after ditorch's options, without a leading ``--``."""
    command = list(args.command)
    return command[1:] if command[:1] == ["--"] else command


def script_problem(command: Sequence[str], subcommand: str = "run") -> str | None:
    """Why ``command`` (script and arguments) cannot run, in one line (no script, a path that is no file); None
    when it can."""
    if not command:
        return f"no script given (usage: ditorch {subcommand} [options] -- script.py [args ...])"
    if not os.path.isfile(command[0]):
        reason = "is a directory" if os.path.isdir(command[0]) else "No such file"
        return f"can't open file {command[0]!r}: {reason}"
    return None


def _activate_ditorch() -> None:
    """Activate ditorch's adapter (done already when ditorch's command line is running)."""
    import ditorch

    ditorch.activate()


def handle(args: argparse.Namespace) -> int:
    """The ``run`` subcommand's handler (``args.command`` is the remainder after ditorch's options)."""
    prepared = script_and_tools(args, "run")
    if isinstance(prepared, int):
        return prepared
    command, tools = prepared
    return run_script(command[0], command[1:], tools)


def run_script(script: str, args: Sequence[str] = (), tools: Sequence[AbstractContextManager] = ()) -> int:
    """Import ditorch, then run ``script`` as ``__main__`` with ``args``; 0 when it returns normally.

    ``tools`` (context managers, e.g. op_tools' tools) are entered just before the script runs and exited
    after it in reverse order, whatever way it ends. ``SystemExit`` raised by the script and any other
    exception propagate to the caller. ``sys.argv`` and ``sys.path`` are restored afterwards, so this can
    also be called in-process.
    """
    problem = script_problem([script])
    if problem is not None:
        print(f"ditorch: {problem}", file=sys.stderr)
        return EXIT_NO_SCRIPT
    _activate_ditorch()
    script_dir = os.path.dirname(os.path.realpath(script))
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, script_dir)
    try:
        with contextlib.ExitStack() as active:
            for tool in tools:
                active.enter_context(tool)
            runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def split_script_argv(argv: Sequence[str], commands: Sequence[str]) -> list[str] | None:
    """For ``python -m ditorch``: the script and its args when ``argv`` names a script, else None.

    ``argv[0]`` names a script when it is not one of the CLI's ``commands`` (``demo``, ``run``, ...),
    not an option, and is a ``.py`` path or an existing file; ``python -m ditorch -- x.py`` also works.
    """
    if not argv:
        return None
    first = argv[0]
    if first == "--":
        return list(argv[1:]) or None
    if first in commands or first.startswith("-"):
        return None
    if first.endswith(".py") or os.path.isfile(first):
        return list(argv)
    return None


def print_script_exception(exc: BaseException, stream: Any = None) -> bool:
    """If ``exc`` came out of a script that ditorch ran (through ``runpy.run_path``: ``ditorch run``, ``profile``,
    ``dump-modules``, a parity run), print its traceback as ``python script.py`` would, from the script's frames
    on, and return True; False (nothing printed) for an exception raised elsewhere."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "run_path" and "runpy" in code.co_filename:
            inner = tb.tb_next
            while inner is not None and "runpy" in inner.tb_frame.f_code.co_filename:
                inner = inner.tb_next
            traceback.print_exception(type(exc), exc, inner if inner is not None else tb,
                                      file=sys.stderr if stream is None else stream)
            return True
        tb = tb.tb_next
    return False
