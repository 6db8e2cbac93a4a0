"""The command line's argument parser and option types, importing nothing heavy (no torch): ``ditorch --help``
and a malformed option answer at once, before any work.

- :class:`ArgumentParser` reports a usage error as one line, ``<prog>: error: <message>`` (exit status 2),
  instead of argparse's usage block;
- :class:`Refused` is a bad input found by a command's checks before torch is imported (a missing file, a
  folder that holds nothing to work on); the command line prints it as one line, exit status 2, as it prints a
  :class:`diopi.env.ConfigError` found later;
- the option types (:func:`int_at_least`, :func:`positive_float`, :func:`seed`) turn a malformed value into
  argparse's one-line error naming the option, the value and the expected form.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

#: Exit status of a user error (a malformed option or variable, a missing file): argparse's own.
EXIT_USAGE = 2


class Refused(Exception):
    """A command's input cannot work (a missing script, a folder without what the command reads); the message
    is one line naming the option or argument, the value and what was expected."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line usage error (``ditorch demo: error: argument --lr: ...``, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr,
              flush=True)
        raise SystemExit(EXIT_USAGE)


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from ``minimum`` (to ``maximum``)."""
    if maximum is not None:
        what = f"an integer from {minimum} to {maximum}"
    else:
        what = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number greater than 0 (a learning rate)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number greater than 0 (e.g. 1e-3), got {text!r}")
    return value


#: The largest seed the demo accepts (its batches mix the seed into a 64-bit generator seed).
MAX_SEED = 2**32 - 1
#: An argparse type: a random seed, an integer from 0 to :data:`MAX_SEED`.
seed = int_at_least(0, MAX_SEED)


def first_positional(argv: Sequence[str]) -> str | None:
    """The command named in ``argv`` (the first argument that is not an option), or None."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None
