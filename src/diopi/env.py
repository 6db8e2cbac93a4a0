"""Reading environment variables the way every ditorch package does: booleans, comma-separated lists and
operator-name lists (whole-name regular expressions). The one copy of each parser; ditorch, torch_dipu and
op_tools call these."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "ATEN_PREFIXES", "FALSE_WORDS", "TRUE_WORDS", "ConfigError", "compile_op_list", "env_flag", "env_int",
    "folder_path", "op_list_matches", "parse_flag", "split_list", "strip_op_prefix",
]

class ConfigError(ValueError):
    """A value the user gave (an environment variable, a command-line option, a keyword) is malformed or names
    nothing that can exist. The message is one line naming the variable or option, the value and the expected
    form; the ``ditorch`` command prints it as that one line and exits with status 2 (``DITORCH_DEBUG=1``: the
    traceback too). A ``ValueError``, so callers that catch those keep working."""


#: The words a boolean switch accepts (case-insensitive, whitespace trimmed); an empty value is false.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def parse_flag(text: str | None) -> bool | None:
    """``True`` for 1/true/yes/on, ``False`` for 0/false/no/off/empty, ``None`` for anything else (the caller
    raises its own error naming where the text came from: a variable, an option)."""
    if text is None:
        return None
    value = text.strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    return None


def env_flag(name: str, default: bool = False, env: Mapping[str, str] | None = None) -> bool:
    """A boolean variable: 1/true/yes/on are true, 0/false/no/off/empty false; anything else is a
    ``ValueError`` naming the variable. ``env`` defaults to ``os.environ``."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None:
        return default
    value = parse_flag(raw)
    if value is None:
        raise ConfigError(f"environment variable {name}={raw!r} is not a boolean "
                         f"(use 1/true/yes/on or 0/false/no/off)")
    return value


def env_int(name: str, default: int, minimum: int = 0, env: Mapping[str, str] | None = None) -> int:
    """An integer variable (unset or empty: ``default``); text that is not an integer ``>= minimum`` raises
    :class:`ConfigError` naming the variable (``RANK=abc`` is the launcher's or the user's mistake, never rank 0)."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{name}={raw!r}: expected an integer >= {minimum}")
    return value


def folder_path(text: str, source: str) -> str:
    """``text`` as a folder to write into: an existing file there raises :class:`ConfigError` naming ``source``
    (caught when the tool starts, not at its first write)."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise ConfigError(f"{source}={text!r} is a file; expected a folder (it is created when missing)")
    return text


def split_list(text: str) -> list[str]:
    """Split a comma- (or newline-) separated list, trimming whitespace and dropping empty entries."""
    return [item.strip() for item in text.replace("\n", ",").split(",") if item.strip()]


#: The namespaces an ATen operator-name entry may start with (``aten.mm``, ``aten::mm``).
ATEN_PREFIXES = ("aten.", "aten::")


def strip_op_prefix(entry: str, prefixes: Iterable[str] = ATEN_PREFIXES) -> str:
    """An operator-name pattern without a leading namespace that log lines print (``aten.mm`` -> ``mm``)."""
    entry = entry.strip()
    for prefix in prefixes:
        if entry.startswith(prefix):
            return entry[len(prefix):]
    return entry


def compile_op_list(entries: Iterable[str], source: str, strip_prefixes: Iterable[str] = ()) -> list[re.Pattern[str]]:
    """Compile operator-name list entries as whole-name regular expressions (match with
    :func:`op_list_matches` or ``pattern.fullmatch``). Entries are whitespace-trimmed; a leading
    ``strip_prefixes`` namespace is dropped (torch_dipu passes ``("aten.", "aten::")``); a bad entry raises
    ``ValueError`` naming ``source`` (the variable or option) and the entry."""
    prefixes = tuple(strip_prefixes)
    patterns = []
    for entry in entries:
        text = strip_op_prefix(entry, prefixes) if prefixes else entry.strip()
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            raise ConfigError(f"{source}: entry {entry!r} is not a valid regular expression: {exc}") from None
    return patterns


def op_list_matches(patterns: Iterable[re.Pattern[str]], *names: str) -> bool:
    """Whether any pattern matches any of ``names`` as a whole name (exactly, or as a regular expression)."""
    return any(p.pattern == name or p.fullmatch(name) for p in patterns for name in names)
