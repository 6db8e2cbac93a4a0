"""Which op names a tool acts on: ``<TOOL>_LIST`` / ``<TOOL>_DISABLE_LIST`` or the keywords.

Unset means every op; an empty list means none. Entries match a whole name, exactly or as a regular
expression. The disable list wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from diopi.env import compile_op_list, op_list_matches
from op_tools.config import op_list_from_env, parse_list

__all__ = ["OpFilter"]


class OpFilter:
    """Decides, per op name (cached), whether a tool acts on it."""

    def __init__(self, env_prefix: str, ops: str | list[str] | None = None,
                 disable_ops: str | list[str] | None = None,
                 env_lists: tuple[Sequence[str] | None, Sequence[str] | None] | None = None) -> None:
        # env_lists: the (list, disable list) a tool's config already read; None reads the environment now.
        env_ops, env_disable = op_list_from_env(env_prefix) if env_lists is None else (
            None if env_lists[0] is None else list(env_lists[0]),
            None if env_lists[1] is None else list(env_lists[1]))
        include = parse_list(ops) if ops is not None else env_ops
        exclude = parse_list(disable_ops) if disable_ops is not None else env_disable
        self.include_entries = include
        self.exclude_entries = exclude or []
        self._include = None if include is None else compile_op_list(include, f"{env_prefix}_LIST")
        self._exclude = compile_op_list(self.exclude_entries, f"{env_prefix}_DISABLE_LIST")
        self._cache: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        try:
            return self._cache[name]
        except KeyError:
            pass
        allowed = ((self._include is None or op_list_matches(self._include, name))
                   and not op_list_matches(self._exclude, name))
        self._cache[name] = allowed
        return allowed
