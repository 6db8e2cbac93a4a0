"""Training steps as the tools count them.

Steps are numbered from 1. The count advances after every ``optimizer.step()`` (a global optimizer hook,
installed when the first tool is created) and on :func:`next_step`, for loops without an optimizer.
"""

from __future__ import annotations

import re

from diopi.env import ConfigError

__all__ = ["StepRange", "current_step", "install_optimizer_hook", "next_step"]

_step = 1
_hook_installed = False


def current_step() -> int:
    """The step now running (1 for the first)."""
    return _step


def next_step() -> int:
    """Advance the step count by hand; returns the new step."""
    global _step
    _step += 1
    return _step


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


class StepRange:
    """Inclusive steps to act on: ``"3"``, ``"2-4"``, ``"5-"`` (from 5 on), a ``(first, last)`` pair
    (``last`` None means no end), or None for every step."""

    def __init__(self, spec: str | tuple[int, int | None] | range | None, source: str = "steps") -> None:
        self.first, self.last = 1, None
        if spec is None:
            return
        if isinstance(spec, range):
            if spec.step != 1 or len(spec) == 0:
                raise ConfigError(f"{source}: expected a non-empty range with step 1, got {spec}")
            self.first, self.last = spec.start, spec.stop - 1
        elif isinstance(spec, tuple):
            self.first, self.last = int(spec[0]), None if spec[1] is None else int(spec[1])
        else:
            match = _RANGE.match(str(spec))
            if not match or not (match.group(1) or match.group(3)) or (match.group(3) and not match.group(2)
                                                                     and match.group(1)):
                raise ConfigError(f"{source}={spec!r} is not a step range (examples: 3, 2-4, 5-)")
            first, dash, last = match.groups()
            self.first = int(first) if first else 1
            self.last = int(last) if last else (None if dash else self.first)
        if self.first < 1 or (self.last is not None and self.last < self.first):
            raise ConfigError(f"{source}={spec!r}: steps are numbered from 1 and the range must not be empty")

    @property
    def unbounded(self) -> bool:
        return self.first == 1 and self.last is None

    def __contains__(self, step: int) -> bool:
        return step >= self.first and (self.last is None or step <= self.last)

    def __repr__(self) -> str:
        return f"StepRange({self.first}-{'' if self.last is None else self.last})"
