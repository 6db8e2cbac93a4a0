"""Every environment variable op_tools reads, in one place (documented in docs/environment.md).

Each one also has a keyword argument on the tool; a keyword wins over the environment.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path

from diopi.env import env_flag, split_list

__all__ = [
    "env_flag",
    "int_at_least",
    "op_list_from_env",
    "parse_byte_size",
    "parse_list",
    "results_dir",
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


def verbose() -> bool:
    """``OP_TOOLS_VERBOSE=1``: full tables instead of one line per finding."""
    return env_flag(VERBOSE_ENV)


def parse_list(value: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """A comma-separated list (or a sequence) of entries, whitespace trimmed; None stays None (= all)."""
    if value is None:
        return None
    if isinstance(value, str):
        return split_list(value)
    return [str(item).strip() for item in value if str(item).strip()]


def op_list_from_env(prefix: str) -> tuple[list[str] | None, list[str] | None]:
    """``<prefix>_LIST`` and ``<prefix>_DISABLE_LIST``: unset means None (all / none disabled)."""
    return parse_list(os.environ.get(f"{prefix}_LIST")), parse_list(os.environ.get(f"{prefix}_DISABLE_LIST"))


def results_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where results go: the keyword, else ``OP_TOOLS_RESULTS_DIR``, else ``./op_tools_results``."""
    if explicit is not None:
        return Path(explicit)
    return Path(os.environ.get(RESULTS_DIR_ENV) or "op_tools_results")


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
            raise ValueError(f"{source}: a byte size cannot be negative ({value})")
        return value
    match = _SIZE.match(str(value))
    unit = (match.group(2) or "").lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"{source}={value!r} is not a byte size (examples: 1000000, 512MiB, 10GB)")
    return int(float(match.group(1)) * _UNITS[unit])
