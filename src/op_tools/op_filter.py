"""Which op names a tool acts on: ``<TOOL>_LIST`` / ``<TOOL>_DISABLE_LIST`` or the keywords.

Unset means every op; an empty list means none. Entries match a whole name, exactly or as a regular
expression. The disable list wins. Entries are checked against the names calls can have when the filter is
built (:mod:`diopi.op_names`: a misspelt name is a warning with the closest names, an error with
``DITORCH_STRICT=1``, and one line at exit when it matched no call).
"""

from __future__ import annotations

from collections.abc import Sequence

from diopi.op_names import CheckedOpList
from op_tools.config import op_list_from_env, parse_list
from op_tools.naming import api_names, is_api_name

__all__ = ["OpFilter"]


class OpFilter:
    """Decides, per op name (cached), whether a tool acts on it."""

    def __init__(self, env_prefix: str, ops: str | list[str] | None = None,
                 disable_ops: str | list[str] | None = None,
                 env_lists: tuple[Sequence[str] | None, Sequence[str] | None] | None = None,
                 owner: str = "") -> None:
        # env_lists: the (list, disable list) a tool's config already read; None reads the environment now.
        env_ops, env_disable = op_list_from_env(env_prefix) if env_lists is None else (
            None if env_lists[0] is None else list(env_lists[0]),
            None if env_lists[1] is None else list(env_lists[1]))
        include = parse_list(ops) if ops is not None else env_ops
        exclude = parse_list(disable_ops) if disable_ops is not None else env_disable
        self.include_entries = include
        self.exclude_entries = exclude or []
        # owner: the tool's name, so that a keyword's messages say whose (OpFallback(ops=) for --fallback)
        sources = (f"{owner}(ops=)" if ops is not None else f"{env_prefix}_LIST",
                   f"{owner}(disable_ops=)" if disable_ops is not None else f"{env_prefix}_DISABLE_LIST")
        self._include = None if include is None else _checked(include, sources[0])
        self._exclude = _checked(self.exclude_entries, sources[1])
        self._cache: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        try:
            return self._cache[name]
        except KeyError:
            pass
        allowed = ((self._include is None or self._include.matches(name))
                   and not self._exclude.matches(name))
        self._cache[name] = allowed
        return allowed


def _checked(entries: list[str], source: str) -> CheckedOpList:
    names = CheckedOpList(entries, source, api_names, accepts=is_api_name)
    names.check()
    return names
