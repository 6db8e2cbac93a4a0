"""Reading environment variables the way every ditorch package does (booleans and comma-separated lists)."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["env_flag", "split_list"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def env_flag(name: str, default: bool = False, env: Mapping[str, str] | None = None) -> bool:
    """A boolean variable: 1/true/yes/on are true, 0/false/no/off/empty false; anything else is a
    ``ValueError`` naming the variable. ``env`` defaults to ``os.environ``."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={raw!r} is not a boolean (use 1 or 0)")


def split_list(text: str) -> list[str]:
    """Split a comma- (or newline-) separated list, trimming whitespace and dropping empty entries."""
    return [item.strip() for item in text.replace("\n", ",").split(",") if item.strip()]
