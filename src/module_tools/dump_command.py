"""``ditorch dump-modules [--out DIR] [--stats-only] [--steps S] -- script.py args``: dump a script's model
without editing the script.

The model is the first module with parameters whose forward is called at the outermost level (not from
inside another module's forward). Its dump starts just before that call; a step ends at each
``optimizer.step()`` (steps count from 1, as every op tool counts them); the dump stops when the script ends, or
after ``--stop-after N`` steps (the script is then ended at the N-th ``optimizer.step()``, the dump written, and the
exit status is 0).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence
from typing import Any

import torch

from diopi.steps import StepRange
from op_tools.config import int_at_least

from .config import DUMP_DIR_ENV, DUMP_FIXED_INPUT_ENV, DUMP_STEPS_ENV, dump_config
from .dump import ModuleDump

__all__ = ["add_arguments", "handle", "main", "run_dumped"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the command's arguments to ``p`` (every ``ditorch`` subcommand plugs in this way)."""
    p.add_argument("--out", default=None, help=f"dump folder (default: ${DUMP_DIR_ENV}, else module_dump)")
    p.add_argument("--stats-only", action="store_true", default=None, help="statistics only, no tensor files")
    p.add_argument("--steps", default=None,
                   help=f"steps to dump, counted from 1: 1-3, 3, 5-, 1,4-5 (default: ${DUMP_STEPS_ENV}, else all)")
    p.add_argument("--fixed-input", default=None, metavar="REF_DUMP",
                   help=f"replay each call on this full reference dump's inputs (default: ${DUMP_FIXED_INPUT_ENV})")
    p.add_argument("--stop-after", type=int_at_least(1), default=None, metavar="N",
                   help="end the script after N steps (N optimizer.step() calls); the dump is written, exit 0")
    p.add_argument("script", nargs="?", default=None, help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


class _ModelFinder:
    """Wraps ``nn.Module.__call__`` until the outermost call of a module with parameters is seen."""

    def __init__(self, make_dump: Any) -> None:
        self.make_dump = make_dump
        self.dump: ModuleDump | None = None
        self.depth = 0
        self.original = torch.nn.Module.__call__

    def install(self) -> None:
        finder = self

        def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if finder.dump is None and finder.depth == 0 and next(module.parameters(), None) is not None:
                finder.uninstall()
                finder.dump = finder.make_dump(module)
                return finder.original(module, *args, **kwargs)
            finder.depth += 1
            try:
                return finder.original(module, *args, **kwargs)
            finally:
                finder.depth -= 1

        torch.nn.Module.__call__ = call  # type: ignore[method-assign]

    def uninstall(self) -> None:
        torch.nn.Module.__call__ = self.original  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    """``ditorch dump-modules``: see :func:`handle`."""
    parser = argparse.ArgumentParser(prog="ditorch dump-modules",
                                     description="Dump every module call of a script's model (forward and backward).")
    add_arguments(parser)
    return handle(parser.parse_args(list(argv) if argv is not None else None))


class _StepsDone(BaseException):
    """Raised at the last wanted ``optimizer.step()`` to end the script (not an ``Exception``: the script's
    own ``except Exception`` does not swallow it)."""


def handle(args: argparse.Namespace) -> int:
    """Run the script with its model dumped; returns the script's exit status."""
    if args.script is None:
        print("ditorch dump-modules: error: no script given (usage: ditorch dump-modules [options] -- script.py "
              "[args ...])", file=sys.stderr)
        return 2
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    config = dump_config()
    out = args.out or config.out_dir or "module_dump"
    stats_only = config.stats_only if args.stats_only is None else True
    steps = StepRange(args.steps, source="--steps") if args.steps is not None else config.steps
    fixed_input = getattr(args, "fixed_input", None) or config.fixed_input
    status, dump = run_dumped(args.script, script_args, out, stats_only=stats_only, steps=steps,
                              stop_after=getattr(args, "stop_after", None), fixed_input=fixed_input)
    if dump is None:
        print("module_tools: the script called no module with parameters; nothing dumped", file=sys.stderr)
    else:
        print(f"module_tools: dumped {type(dump.model).__name__} to {dump.rank_dir}", file=sys.stderr)
    return status


def run_dumped(script: str, script_args: Sequence[str], out: str, stats_only: bool = False, steps: Any = None,
               stop_after: int | None = None, fixed_input: str | None = None) -> tuple[int, ModuleDump | None]:
    """Run ``script`` as ``__main__`` in this process with a ModuleDump of its model; end it after
    ``stop_after`` steps when given; ``fixed_input``: a reference dump for the fixed-input replay. Returns the
    script's exit status (0 when stopped) and the dump (None when no module with parameters was called).
    Exceptions other than ``SystemExit`` propagate (the dump is written first)."""
    handles: list[Any] = []

    def make_dump(model: torch.nn.Module) -> ModuleDump:
        dump = ModuleDump(model, out, stats_only=stats_only, steps=steps, fixed_input=fixed_input).start()
        if stop_after is not None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            first = dump.current_step

            def stop(*_: Any) -> None:
                if dump.current_step - first >= stop_after:
                    raise _StepsDone

            handles.append(register_optimizer_step_post_hook(stop))  # after op_tools' step count (installed first)
        return dump

    finder = _ModelFinder(make_dump)
    finder.install()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _StepsDone:
        status = 0
    finally:
        finder.uninstall()
        for handle_ in handles:
            handle_.remove()
        sys.argv, sys.path[:] = saved_argv, saved_path
        if finder.dump is not None:
            finder.dump.stop()
    return status, finder.dump
