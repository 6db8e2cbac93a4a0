"""Run an unmodified script with ditorch active: ``ditorch run [options] -- script.py args``.

``python -m ditorch script.py args`` is the same. ditorch is imported first (which activates the vendor
adapter and the ``cuda`` mocking), then the script runs as ``__main__`` the way ``python script.py``
would run it: ``sys.argv`` is the script's argv and the script's directory comes first on ``sys.path``.
The script's exit status and exceptions propagate unchanged (``sys.exit(3)`` exits with 3, an uncaught
exception prints its traceback and exits with 1).

Options before ``--`` belong to ditorch (later issues add tool options here); everything after the
script path belongs to the script.
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
from collections.abc import Sequence

#: Exit status when the script cannot be opened (the same as ``python missing.py``).
EXIT_NO_SCRIPT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Configure the ``run`` subcommand's parser. Options (added by later issues) go before ``--``."""
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- script.py [args ...]",
        help="the script to run and its arguments; '--' separates them from ditorch's options "
             "(optional when the script path does not start with '-')",
    )


def handle(args: argparse.Namespace) -> int:
    """The ``run`` subcommand's handler (``args.command`` is the remainder after ditorch's options)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("ditorch run: no script given (usage: ditorch run [options] -- script.py [args ...])", file=sys.stderr)
        return EXIT_NO_SCRIPT
    return run_script(command[0], command[1:])


def run_script(script: str, args: Sequence[str] = ()) -> int:
    """Import ditorch, then run ``script`` as ``__main__`` with ``args``; 0 when it returns normally.

    ``SystemExit`` raised by the script and any other exception propagate to the caller. ``sys.argv``
    and ``sys.path`` are restored afterwards, so this can also be called in-process.
    """
    if not os.path.isfile(script):
        reason = "is a directory" if os.path.isdir(script) else "No such file"
        print(f"ditorch: can't open file {script!r}: {reason}", file=sys.stderr)
        return EXIT_NO_SCRIPT
    importlib.import_module("ditorch")  # activates the adapter (already done when ditorch's CLI is running)
    script_dir = os.path.dirname(os.path.realpath(script))
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, script_dir)
    try:
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
