"""``python -m ditorch``: the ditorch command line, or ``python -m ditorch script.py args``.

``python -m ditorch demo|run|info|...`` reaches the CLI (``ditorch --help``); when the first argument
is a script instead of a command (a ``.py`` path or an existing file, or anything after ``--``), the
script runs with ditorch active, exactly as ``ditorch run -- script.py args`` would run it.
"""

import sys

from ditorch import run
from ditorch.cli import COMMAND_NAMES, main, run_script_command

script_argv = run.split_script_argv(sys.argv[1:], COMMAND_NAMES)
sys.exit(run_script_command(script_argv) if script_argv else main())
