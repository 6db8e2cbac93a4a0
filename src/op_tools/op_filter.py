"""Which op names a tool acts on: ``<TOOL>_LIST`` / ``<TOOL>_DISABLE_LIST`` or the keywords.

Unset means every op; an empty list means none. Entries match a whole name, exactly or as a regular
expression. The disable list wins.
"""

from __future__ import annotations

import re

from op_tools.config import op_list_from_env, parse_list

__all__ = ["OpFilter"]


def _compile(entries: list[str], source: str) -> list[re.Pattern[str]]:
    patterns = []
    for entry in entries:
        try:
            patterns.append(re.compile(entry))
        except re.error as exc:
            raise ValueError(f"{source}: entry {entry!r} is not a valid regular expression: {exc}") from None
    return patterns


class OpFilter:
    """Decides, per op name (cached), whether a tool acts on it."""

    def __init__(self, env_prefix: str, ops: str | list[str] | None = None,
                 disable_ops: str | list[str] | None = None) -> None:
        env_ops, env_disable = op_list_from_env(env_prefix)
        include = parse_list(ops) if ops is not None else env_ops
        exclude = parse_list(disable_ops) if disable_ops is not None else env_disable
        self.include_entries = include
        self.exclude_entries = exclude or []
        self._include = None if include is None else _compile(include, f"{env_prefix}_LIST")
        self._exclude = _compile(self.exclude_entries, f"{env_prefix}_DISABLE_LIST")
        self._cache: dict[str, bool] = {}

    @staticmethod
    def _any(patterns: list[re.Pattern[str]], name: str) -> bool:
        return any(p.pattern == name or p.fullmatch(name) for p in patterns)

    def __call__(self, name: str) -> bool:
        try:
            return self._cache[name]
        except KeyError:
            pass
        allowed = (self._include is None or self._any(self._include, name)) and not self._any(self._exclude, name)
        self._cache[name] = allowed
        return allowed
