"""Every environment variable module_tools reads, in one place (documented in docs/environment.md).

- ``MODULE_DUMP_DIR``: dump the model given to :func:`module_tools.dump_from_env` into this folder.
- ``MODULE_DUMP_STATS_ONLY=1``: statistics only, no tensor files.
- ``MODULE_DUMP_STEPS``: the steps to record, in op_tools' syntax (``1-3``, ``3``, ``5-``, ``1,4-5``; steps count
  from 1, :class:`diopi.steps.StepRange`).
- ``MODULE_DUMP_FIXED_INPUT``: a full reference dump; each call is also replayed on its inputs (fixed-input mode).

A malformed value raises ``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from diopi.env import ConfigError, env_flag, folder_path
from diopi.steps import StepRange

__all__ = ["DUMP_DIR_ENV", "DUMP_FIXED_INPUT_ENV", "DUMP_STATS_ONLY_ENV", "DUMP_STEPS_ENV", "DumpConfig",
           "dump_config"]

DUMP_DIR_ENV = "MODULE_DUMP_DIR"
DUMP_STATS_ONLY_ENV = "MODULE_DUMP_STATS_ONLY"
DUMP_STEPS_ENV = "MODULE_DUMP_STEPS"
DUMP_FIXED_INPUT_ENV = "MODULE_DUMP_FIXED_INPUT"


@dataclass(frozen=True)
class DumpConfig:
    """The module dump's settings from the environment; ``out_dir`` None means no dump."""

    out_dir: str | None
    stats_only: bool
    steps: StepRange
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
                      steps=StepRange(steps_text or None, DUMP_STEPS_ENV), fixed_input=fixed_input)
