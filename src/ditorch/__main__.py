"""``python -m ditorch``: the ditorch command line, or ``python -m ditorch script.py args``.

``python -m ditorch demo|run|info|...`` reaches the CLI (``ditorch --help``); when the first argument
is a script instead of a command (a ``.py`` path or an existing file, or anything after ``--``), the
script runs with ditorch active, exactly as ``ditorch run -- script.py args`` would run it.
"""

import sys

from ditorch import run
from ditorch.cli import build_parser, main


def _commands() -> list[str]:
    subparsers = build_parser()._subparsers  # the CLI's subcommand names (demo, run, info, ...)
    return [name for action in (subparsers._group_actions if subparsers else []) for name in (action.choices or {})]


script_argv = run.split_script_argv(sys.argv[1:], _commands())
sys.exit(run.run_script(script_argv[0], script_argv[1:]) if script_argv else main())
