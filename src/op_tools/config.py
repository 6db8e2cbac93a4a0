"""Every environment variable op_tools reads, in one place (documented in docs/environment.md).

Each one also has a keyword argument on the tool; a keyword wins over the environment. Each tool's
settings are a small frozen object built from the environment by one function (:func:`capture_config`,
:func:`observe_config`, ...); a tool reads it when it is created and again at each ``start()`` (never per
call), so one tool object reused across ``start()`` calls follows the variables in force at each start.
A malformed value raises ``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from diopi.env import ConfigError, env_flag, env_int, folder_path, split_list

if TYPE_CHECKING:
    import torch

__all__ = [
    "AutoCompareConfig",
    "CaptureConfig",
    "DtypeCastConfig",
    "FallbackConfig",
    "ObserveConfig",
    "TimeMeasureConfig",
    "ToolConfig",
    "autocompare_config",
    "capture_config",
    "device_name",
    "dtype_cast_config",
    "env_flag",
    "fallback_config",
    "int_at_least",
    "observe_config",
    "op_list_from_env",
    "overflow_check_config",
    "parse_cast",
    "parse_byte_size",
    "parse_list",
    "rank",
    "results_dir",
    "run_id",
    "time_measure_config",
    "tool_config",
    "verbose",
]

RESULTS_DIR_ENV = "OP_TOOLS_RESULTS_DIR"
VERBOSE_ENV = "OP_TOOLS_VERBOSE"
DEVICE_ENV = "OP_TOOLS_DEVICE"
RUN_ID_ENV = "OP_TOOLS_RUN_ID"
CAPTURE_MAX_BYTES_ENV = "OP_CAPTURE_MAX_BYTES"
CAPTURE_MODE_ENV = "OP_CAPTURE_MODE"
CAPTURE_STEPS_ENV = "OP_CAPTURE_STEPS"
OBSERVE_FILE_ENV = "OP_OBSERVE_FILE"
FALLBACK_RETRY_FLOAT32_ENV = "OP_FALLBACK_RETRY_FLOAT32"
DTYPE_CAST_DICT_ENV = "OP_DTYPE_CAST_DICT"
OVERFLOW_CHECK_STEPS_ENV = "OP_OVERFLOW_CHECK_STEPS"
AUTOCOMPARE_STEPS_ENV = "OP_AUTOCOMPARE_STEPS"
AUTOCOMPARE_MAX_CASES_ENV = "OP_AUTOCOMPARE_MAX_CASES"
TIME_MEASURE_MODE_ENV = "OP_TIME_MEASURE_MODE"
TIME_MEASURE_TOP_ENV = "OP_TIME_MEASURE_TOP"
TIME_MEASURE_STEPS_ENV = "OP_TIME_MEASURE_STEPS"


CAPTURE_MODES = ("data", "stats")
TIME_MEASURE_MODES = ("event", "sync")
DEFAULT_CAPTURE_MAX_BYTES = 10 * 2**30
DEFAULT_DTYPE_CAST = "torch.float16->torch.float32,torch.bfloat16->torch.float32"


def _environ(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def verbose(env: Mapping[str, str] | None = None) -> bool:
    """``OP_TOOLS_VERBOSE=1``: full tables instead of one line per finding."""
    return env_flag(VERBOSE_ENV, env=env)


def device_name(env: Mapping[str, str] | None = None) -> str | None:
    """``OP_TOOLS_DEVICE`` (None: unset or empty, the current accelerator)."""
    return _environ(env).get(DEVICE_ENV) or None


def run_id(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The ``<run>`` folder: the keyword, else ``OP_TOOLS_RUN_ID``, else the time now, or in a multi-process
    launch a name every rank of the launch shares (:func:`diopi.result_table.default_run_id`)."""
    from diopi.result_table import default_run_id

    given = explicit or _environ(env).get(RUN_ID_ENV)
    if given and (given.strip() != given or any(c in given for c in "/\\") or given in (".", "..")):
        source = "run_id" if explicit else RUN_ID_ENV
        raise ConfigError(f"{source}={given!r}: expected one folder name (no slashes, not . or ..)")
    return given or default_run_id()


def rank(env: Mapping[str, str] | None = None) -> int:
    """``RANK`` (0 when unset; text that is not an integer >= 0 raises naming it; torch.distributed wins where it
    is initialized)."""
    return env_int("RANK", 0, env=env)


def _int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected {what}") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r}: expected {what}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return value


def _steps(env: Mapping[str, str], name: str | None) -> str | None:
    if name is None:
        return None
    raw = env.get(name) or None
    if raw is not None:
        from diopi.steps import StepRange

        StepRange(raw, source=name)  # a malformed range fails here, naming the variable
    return raw


@dataclass(frozen=True)
class ToolConfig:
    """The settings every tool takes from the environment (None: unset)."""

    #: ``<prefix>_LIST`` / ``<prefix>_DISABLE_LIST`` entries (None: unset, every op / none disabled).
    ops: tuple[str, ...] | None
    disable_ops: tuple[str, ...] | None
    #: The tool's ``<prefix>_STEPS`` text (None: every step or the tool has no steps variable).
    steps: str | None
    #: ``OP_TOOLS_DEVICE`` (None: the current accelerator).
    device: str | None
    #: ``OP_TOOLS_VERBOSE``.
    verbose: bool


@dataclass(frozen=True)
class ObserveConfig(ToolConfig):
    #: ``OP_OBSERVE_FILE`` (None: stderr).
    file: str | None


@dataclass(frozen=True)
class CaptureConfig(ToolConfig):
    #: ``OP_CAPTURE_MODE``: ``data`` or ``stats``.
    mode: str
    #: ``OP_CAPTURE_MAX_BYTES`` in bytes.
    max_bytes: int


@dataclass(frozen=True)
class AutoCompareConfig(ToolConfig):
    #: ``OP_AUTOCOMPARE_MAX_CASES``: FAIL cases saved per run.
    max_cases: int


@dataclass(frozen=True)
class TimeMeasureConfig(ToolConfig):
    #: ``OP_TIME_MEASURE_MODE``: ``event``, ``sync`` or None (the device decides).
    mode: str | None
    #: ``OP_TIME_MEASURE_TOP``: summary entries printed at stop.
    top: int


@dataclass(frozen=True)
class FallbackConfig(ToolConfig):
    #: ``OP_FALLBACK_RETRY_FLOAT32``.
    retry_float32: bool


@dataclass(frozen=True)
class DtypeCastConfig(ToolConfig):
    #: ``OP_DTYPE_CAST_DICT`` as text (parsed by :func:`op_tools.dtype_cast.parse_cast`, naming the variable).
    cast: str


def _common(prefix: str, steps_env: str | None, env: Mapping[str, str]) -> dict:
    ops, disable_ops = op_list_from_env(prefix, env)
    return {
        "ops": None if ops is None else tuple(ops),
        "disable_ops": None if disable_ops is None else tuple(disable_ops),
        "steps": _steps(env, steps_env),
        "device": device_name(env),
        "verbose": verbose(env),
    }


def tool_config(prefix: str, steps_env: str | None = None, env: Mapping[str, str] | None = None) -> ToolConfig:
    """The common settings of a tool whose variables start with ``prefix`` (``OP_CAPTURE``)."""
    return ToolConfig(**_common(prefix, steps_env, _environ(env)))


def observe_config(env: Mapping[str, str] | None = None) -> ObserveConfig:
    """OpObserve: ``OP_OBSERVE_LIST``, ``OP_OBSERVE_DISABLE_LIST``, ``OP_OBSERVE_FILE``."""
    env = _environ(env)
    file = env.get(OBSERVE_FILE_ENV) or None
    if file is not None and os.path.isdir(file):
        raise ConfigError(f"{OBSERVE_FILE_ENV}={file!r} is a folder; expected the path of the file to write")
    return ObserveConfig(**_common("OP_OBSERVE", None, env), file=file)


def capture_config(env: Mapping[str, str] | None = None) -> CaptureConfig:
    """OpCapture: lists, ``OP_CAPTURE_STEPS``, ``OP_CAPTURE_MODE``, ``OP_CAPTURE_MAX_BYTES``."""
    env = _environ(env)
    return CaptureConfig(**_common("OP_CAPTURE", CAPTURE_STEPS_ENV, env),
                         mode=_choice(env, CAPTURE_MODE_ENV, CAPTURE_MODES) or "data",
                         max_bytes=parse_byte_size(env.get(CAPTURE_MAX_BYTES_ENV) or DEFAULT_CAPTURE_MAX_BYTES,
                                                   CAPTURE_MAX_BYTES_ENV))


def autocompare_config(env: Mapping[str, str] | None = None) -> AutoCompareConfig:
    """OpAutoCompare: lists, ``OP_AUTOCOMPARE_STEPS``, ``OP_AUTOCOMPARE_MAX_CASES`` (the tolerance variables
    are :mod:`diopi.compare`'s)."""
    from diopi.compare import check_tolerance_env

    env = _environ(env)
    check_tolerance_env(env)
    return AutoCompareConfig(**_common("OP_AUTOCOMPARE", AUTOCOMPARE_STEPS_ENV, env),
                             max_cases=_int(env, AUTOCOMPARE_MAX_CASES_ENV, 100, 0))


def overflow_check_config(env: Mapping[str, str] | None = None) -> ToolConfig:
    """OpOverflowCheck (the settings every tool has): lists and ``OP_OVERFLOW_CHECK_STEPS``."""
    return tool_config("OP_OVERFLOW_CHECK", OVERFLOW_CHECK_STEPS_ENV, env)


def time_measure_config(env: Mapping[str, str] | None = None) -> TimeMeasureConfig:
    """OpTimeMeasure: lists, ``OP_TIME_MEASURE_STEPS``, ``OP_TIME_MEASURE_MODE``, ``OP_TIME_MEASURE_TOP``."""
    env = _environ(env)
    return TimeMeasureConfig(**_common("OP_TIME_MEASURE", TIME_MEASURE_STEPS_ENV, env),
                             mode=_choice(env, TIME_MEASURE_MODE_ENV, TIME_MEASURE_MODES),
                             top=_int(env, TIME_MEASURE_TOP_ENV, 20, 0))


def fallback_config(env: Mapping[str, str] | None = None) -> FallbackConfig:
    """OpFallback: lists and ``OP_FALLBACK_RETRY_FLOAT32``."""
    env = _environ(env)
    return FallbackConfig(**_common("OP_FALLBACK", None, env),
                          retry_float32=env_flag(FALLBACK_RETRY_FLOAT32_ENV, env=env))


def dtype_cast_config(env: Mapping[str, str] | None = None) -> DtypeCastConfig:
    """OpDtypeCast: lists and ``OP_DTYPE_CAST_DICT``."""
    env = _environ(env)
    cast = env.get(DTYPE_CAST_DICT_ENV) or DEFAULT_DTYPE_CAST
    parse_cast(cast, DTYPE_CAST_DICT_ENV)  # a malformed table is an error when the tool starts
    return DtypeCastConfig(**_common("OP_DTYPE_CAST", None, env), cast=cast)


def _dtype(text: str, source: str) -> torch.dtype:
    import torch

    name = text.strip().removeprefix("torch.")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigError(f"{source}: {text.strip()!r} is not a floating dtype (example: {DEFAULT_DTYPE_CAST})")
    return dtype


def parse_cast(value: str | dict, source: str = DTYPE_CAST_DICT_ENV) -> dict[torch.dtype, torch.dtype]:
    """``"torch.float16->torch.float32,bfloat16->float32"`` (or a dict of dtypes or names) -> OpDtypeCast's cast
    table; a malformed value raises :class:`ConfigError` naming ``source``."""
    import torch

    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        pairs = []
        for entry in (e for e in str(value).split(",") if e.strip()):
            parts = entry.split("->")
            if len(parts) != 2:
                raise ConfigError(f"{source}: entry {entry.strip()!r} is not 'from->to' "
                                  f"(example: {DEFAULT_DTYPE_CAST})")
            pairs.append((parts[0], parts[1]))
    table = {}
    for key, target in pairs:
        src = key if isinstance(key, torch.dtype) else _dtype(str(key), source)
        dst = target if isinstance(target, torch.dtype) else _dtype(str(target), source)
        if src is not dst:
            table[src] = dst
    return table


def parse_list(value: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """A comma-separated list (or a sequence) of entries, whitespace trimmed; None stays None (= all)."""
    if value is None:
        return None
    if isinstance(value, str):
        return split_list(value)
    return [str(item).strip() for item in value if str(item).strip()]


def op_list_from_env(prefix: str, env: Mapping[str, str] | None = None) -> tuple[list[str] | None, list[str] | None]:
    """``<prefix>_LIST`` and ``<prefix>_DISABLE_LIST``: unset means None (all / none disabled)."""
    env = _environ(env)
    return parse_list(env.get(f"{prefix}_LIST")), parse_list(env.get(f"{prefix}_DISABLE_LIST"))


def results_dir(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where results go: the keyword, else ``OP_TOOLS_RESULTS_DIR``, else ``./op_tools_results``."""
    if explicit is not None:
        return Path(folder_path(os.fspath(explicit), "results_dir"))
    return Path(folder_path(_environ(env).get(RESULTS_DIR_ENV) or "op_tools_results", RESULTS_DIR_ENV))


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "ki": 2**10, "m": 10**6, "mb": 10**6,
          "mib": 2**20, "mi": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "gi": 2**30, "t": 10**12,
          "tb": 10**12, "tib": 2**40, "ti": 2**40}


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer of at least ``minimum`` (``--run_times``, ``--top``, ``--steps``)."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


def parse_byte_size(value: str | int, source: str) -> int:
    """``"512MiB"``, ``"10GB"``, ``"1000"`` -> bytes; an error naming ``source`` otherwise."""
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{source}: a byte size cannot be negative ({value})")
        return value
    match = _SIZE.match(str(value))
    unit = (match.group(2) or "").lower() if match else None
    if not match or unit not in _UNITS:
        raise ConfigError(f"{source}={value!r} is not a byte size (examples: 1000000, 512MiB, 10GB)")
    return int(float(match.group(1)) * _UNITS[unit])
