"""Every environment variable module_tools reads, in one place (documented in docs/environment.md).

- ``MODULE_DUMP_DIR``: dump the model given to :func:`module_tools.dump_from_env` into this folder.
- ``MODULE_DUMP_STATS_ONLY=1``: statistics only, no tensor files.
- ``MODULE_DUMP_STEPS``: the steps to record (``0-2``, ``3``, ``5-``, ``0,4-5``; steps count from 0).
- ``MODULE_DUMP_FIXED_INPUT``: a full reference dump; each call is also replayed on its inputs (fixed-input mode).

A malformed value raises ``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from diopi.env import ConfigError, env_flag, folder_path, split_list

__all__ = ["DUMP_DIR_ENV", "DUMP_FIXED_INPUT_ENV", "DUMP_STATS_ONLY_ENV", "DUMP_STEPS_ENV", "DumpConfig", "StepSet",
           "dump_config", "parse_steps"]

DUMP_DIR_ENV = "MODULE_DUMP_DIR"
DUMP_STATS_ONLY_ENV = "MODULE_DUMP_STATS_ONLY"
DUMP_STEPS_ENV = "MODULE_DUMP_STEPS"
DUMP_FIXED_INPUT_ENV = "MODULE_DUMP_FIXED_INPUT"

_RANGE = re.compile(r"^(\d+)?\s*(-)?\s*(\d+)?$")


@dataclass(frozen=True)
class StepSet:
    """Steps to record: inclusive ``(first, last)`` ranges, ``last`` None meaning no end; no ranges = every step."""

    ranges: tuple[tuple[int, int | None], ...] = ()

    def __contains__(self, step: object) -> bool:
        if not isinstance(step, int):
            return False
        if not self.ranges:
            return True
        return any(first <= step and (last is None or step <= last) for first, last in self.ranges)

    def done_after(self, step: int) -> bool:
        """True when no step after ``step`` is recorded."""
        if not self.ranges:
            return False
        return all(last is not None and last <= step for _, last in self.ranges)


def parse_steps(spec: str | range | tuple[int, ...] | list[int] | StepSet | None,
                source: str = "steps") -> StepSet:
    """A :class:`StepSet` from ``"0-2"``, ``"3"``, ``"5-"``, ``"0,4-5"``, a ``range``, an iterable of step
    numbers, or None (every step)."""
    if spec is None:
        return StepSet()
    if isinstance(spec, StepSet):
        return spec
    if isinstance(spec, range):
        if spec.step != 1 or len(spec) == 0:
            raise ConfigError(f"{source}: expected a non-empty range with step 1, got {spec}")
        return StepSet(((spec.start, spec.stop - 1),))
    if not isinstance(spec, str):
        steps = sorted({int(s) for s in spec})
        if not steps or steps[0] < 0:
            raise ConfigError(f"{source}: expected step numbers >= 0, got {spec!r}")
        return StepSet(tuple((s, s) for s in steps))
    ranges = []
    for part in split_list(spec):
        m = _RANGE.match(part)
        if not m or (m.group(1) is None and m.group(3) is None) or (m.group(2) is None and m.group(3) is not None
                                                                  and m.group(1) is not None):
            raise ConfigError(f"{source}: expected steps like '0-2', '3', '5-' or '0,4-5', got {spec!r}")
        first = int(m.group(1)) if m.group(1) is not None else 0
        if m.group(2) is None:
            last: int | None = first
        else:
            last = int(m.group(3)) if m.group(3) is not None else None
        if last is not None and last < first:
            raise ConfigError(f"{source}: empty step range {part!r} in {spec!r}")
        ranges.append((first, last))
    if not ranges:
        raise ConfigError(f"{source}: no steps in {spec!r}")
    return StepSet(tuple(ranges))


@dataclass(frozen=True)
class DumpConfig:
    """The module dump's settings from the environment; ``out_dir`` None means no dump."""

    out_dir: str | None
    stats_only: bool
    steps: StepSet
    fixed_input: str | None = None


def dump_config(env: Mapping[str, str] | None = None) -> DumpConfig:
    """Read ``MODULE_DUMP_DIR``, ``MODULE_DUMP_STATS_ONLY``, ``MODULE_DUMP_STEPS`` and ``MODULE_DUMP_FIXED_INPUT``."""
    env = os.environ if env is None else env
    out_dir = env.get(DUMP_DIR_ENV, "").strip() or None
    steps_text = env.get(DUMP_STEPS_ENV, "").strip()
    fixed_input = env.get(DUMP_FIXED_INPUT_ENV, "").strip() or None
    if fixed_input is not None and not os.path.isdir(fixed_input):
        raise ConfigError(f"{DUMP_FIXED_INPUT_ENV}={fixed_input!r} is not a folder; expected a full reference dump "
                          "(a MODULE_DUMP_DIR written without MODULE_DUMP_STATS_ONLY)")
    return DumpConfig(out_dir=None if out_dir is None else folder_path(out_dir, DUMP_DIR_ENV),
                      stats_only=env_flag(DUMP_STATS_ONLY_ENV, env=env),
                      steps=parse_steps(steps_text or None, DUMP_STEPS_ENV), fixed_input=fixed_input)
