"""Training steps as every tool counts them (op tools, module dumps, torch_dipu's device auto-compare): one
counter, one syntax. It lives in diopi, the lowest layer, so that every package can count with it.

Steps are numbered from 1. The count advances after every ``optimizer.step()`` (a global optimizer hook,
installed when the first tool is created) and on :func:`next_step`, for loops without an optimizer. Tools that
must finish something when a step ends (a module dump writes the step's calls) register a listener with
:func:`on_step_end`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from diopi.env import ConfigError, split_list

__all__ = ["StepRange", "current_step", "install_optimizer_hook", "next_step", "on_step_end"]

_step = 1
_hook_installed = False
_listeners: list[Callable[[int], None]] = []


def current_step() -> int:
    """The step now running (1 for the first)."""
    return _step


def next_step() -> int:
    """End the current step (by hand, or after ``optimizer.step()``); returns the new step. The listeners of
    :func:`on_step_end` are told which step ended."""
    global _step
    _step += 1
    for listener in list(_listeners):
        listener(_step - 1)
    return _step


def on_step_end(listener: Callable[[int], None]) -> Callable[[], None]:
    """Call ``listener(ended_step)`` at the end of every step; returns the function that removes it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def _after_optimizer_step(optimizer: object, args: object, kwargs: object) -> None:
    next_step()


def install_optimizer_hook() -> None:
    """Count ``optimizer.step()`` calls as steps (once per process)."""
    global _hook_installed
    if _hook_installed:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_after_optimizer_step)
    _hook_installed = True


_RANGE = re.compile(r"^\s*(\d+)?\s*(-)?\s*(\d+)?\s*$")
_EXAMPLES = "examples: 3, 2-4, 5-, 1,4-5"


class StepRange:
    """Inclusive steps to act on: ``"3"``, ``"2-4"``, ``"5-"`` (from 5 on), comma lists of those
    (``"1,4-5"``), a ``(first, last)`` pair (``last`` None means no end), a ``range``, an iterable of step
    numbers, or None for every step. Steps are numbered from 1."""

    def __init__(self, spec: str | tuple[int, int | None] | range | Iterable[int] | StepRange | None,
                 source: str = "steps") -> None:
        self.ranges: tuple[tuple[int, int | None], ...] = ((1, None),)
        if spec is None:
            return
        if isinstance(spec, StepRange):
            self.ranges = spec.ranges
            return
        if isinstance(spec, range):
            if spec.step != 1 or len(spec) == 0:
                raise ConfigError(f"{source}: expected a non-empty range with step 1, got {spec}")
            ranges = [(spec.start, spec.stop - 1)]
        elif isinstance(spec, tuple) and len(spec) == 2 and (spec[1] is None or spec[1] >= spec[0]):
            ranges = [(int(spec[0]), None if spec[1] is None else int(spec[1]))]
        elif isinstance(spec, str):
            ranges = [self._parse(part, spec, source) for part in split_list(spec)]
        else:
            ranges = [(int(s), int(s)) for s in sorted(set(spec))]
        if not ranges:
            raise ConfigError(f"{source}={spec!r}: no steps ({_EXAMPLES})")
        if any(first < 1 or (last is not None and last < first) for first, last in ranges):
            raise ConfigError(f"{source}={spec!r}: steps are numbered from 1 and a range must not be empty")
        self.ranges = tuple(ranges)

    @staticmethod
    def _parse(part: str, spec: str, source: str) -> tuple[int, int | None]:
        match = _RANGE.match(part)
        if not match or not (match.group(1) or match.group(3)) or (match.group(3) and not match.group(2)
                                                                 and match.group(1)):
            raise ConfigError(f"{source}={spec!r} is not a step range ({_EXAMPLES})")
        first, dash, last = match.groups()
        start = int(first) if first else 1
        return start, int(last) if last else (None if dash else start)

    @property
    def unbounded(self) -> bool:
        """Every step."""
        return self.ranges == ((1, None),)

    def done_after(self, step: int) -> bool:
        """No step after ``step`` is in the set."""
        return all(last is not None and last <= step for _, last in self.ranges)

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and any(first <= step and (last is None or step <= last)
                                             for first, last in self.ranges)

    def __repr__(self) -> str:
        parts = (f"{a}-{'' if b is None else b}" if b != a else str(a) for a, b in self.ranges)
        return f"StepRange({','.join(parts)})"
