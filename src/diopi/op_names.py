"""Operator-name lists a user types, checked against the names that can occur.

Every op list and pattern (``OP_*_LIST``, ``DIPU_FORCE_FALLBACK_OPS_LIST``, ``DROPLET_FAULTS``, ``--fallback``,
``apply_feature(ops=...)``, ...) is a :class:`CheckedOpList`. Three checks, one object:

1. **At start** (:meth:`CheckedOpList.check`): an entry that matches none of the names that can occur (the list's
   ``known`` names: op_tools' API names, ATen operators, DIOPI functions) is one line on stderr with the closest
   names (``did you mean linear?``); with ``DITORCH_STRICT=1`` it is a :class:`~diopi.env.ConfigError` instead.
2. **While running** (:meth:`CheckedOpList.matches`): the answer :func:`~diopi.env.op_list_matches` gives, and a
   note of which entries matched and which names were asked about. The caller caches answers per name, so this
   costs nothing per call.
3. **At exit**: each entry that matched no call that ran gets one line naming the ops that ran with a similar
   name (``DROPLET_FAULTS entry 'max_pool2d_with_indices' matched no call; ops that ran with a similar name:
   max_pool2d``).

A list built again (a tool started twice) shares its entries' bookkeeping with the earlier copies: each line is
printed once per (list, entry) and process.
"""

from __future__ import annotations

import atexit
import difflib
import functools
import re
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from diopi.env import ConfigError, compile_op_list, env_flag, op_list_matches, strip_op_prefix

__all__ = ["CheckedOpList", "STRICT_ENV", "aten_names", "closest", "ledger_lines", "strict"]

STRICT_ENV = "DITORCH_STRICT"
#: A plain name (no regular-expression syntax but dots, which also match themselves).
_PLAIN = re.compile(r"[\w.:]+")


def strict() -> bool:
    """``DITORCH_STRICT=1``: an op-list entry that can match nothing is an error instead of a warning."""
    return env_flag(STRICT_ENV)


def closest(name: str, candidates: Collection[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` names of ``candidates`` closest to ``name``: spelling neighbours (difflib) of the whole
    name, else of its last dotted part (``torch.nn.functional.linaer`` -> ``torch.nn.functional.linear``), else
    names that contain it or that it contains (``max_pool2d`` for ``max_pool2d_with_indices``)."""
    found = difflib.get_close_matches(name, candidates, n=limit, cutoff=0.75)
    if found:
        best = difflib.SequenceMatcher(None, name, found[0]).ratio()
        return [c for c in found if difflib.SequenceMatcher(None, name, c).ratio() >= best - 0.04]
    tail = _tail(name)
    by_tail: dict[str, list[str]] = {}
    for candidate in candidates:
        by_tail.setdefault(_tail(candidate), []).append(candidate)
    near = [c for t in difflib.get_close_matches(tail, list(by_tail), n=limit, cutoff=0.75) for c in by_tail[t]]
    if not near:
        near = [c for t, names in by_tail.items() if _contains(t, tail) for c in names]
    return sorted(near, key=lambda c: (-difflib.SequenceMatcher(None, name, c).ratio(), c))[:limit]


def _tail(name: str) -> str:
    return name.rsplit(".", 1)[-1].rpartition("::")[2].lower()


def _contains(a: str, b: str) -> bool:
    """One name holds the other and the shorter is a real part of it (4+ characters, a third of the longer)."""
    short, long = sorted((a, b), key=len)
    return short != long and short in long and len(short) >= max(4, len(long) // 3)


@functools.cache
def aten_names(with_functions: bool = False) -> frozenset[str]:
    """Every ATen operator the dispatcher knows, as packet (``add``) and overload (``add.Tensor``,
    ``mm.default``) names (with ``with_functions``, every DIOPI function's name too): what a device-level
    pattern may match."""
    import torch

    from diopi.registry import functions

    names: set[str] = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if qualified.startswith("aten::"):
            overload = qualified[6:]
            packet = overload.split(".", 1)[0]
            names.update((packet, overload if "." in overload else f"{packet}.default"))
    if with_functions:
        names.update(fn.name for fn in functions())
    return frozenset(names)


@dataclass
class _Entry:
    """One (list, entry) of this process: whether it matched a call, and the names its list was asked about."""

    source: str
    text: str
    seen: set[str]
    matched: bool = False
    warned: bool = False
    silenced: bool = False


@dataclass
class _Ledger:
    entries: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    seen: dict[str, set[str]] = field(default_factory=dict)
    hooked: bool = False

    def entry(self, source: str, text: str) -> _Entry:
        key = (source, text)
        if key not in self.entries:
            self.entries[key] = _Entry(source, text, self.seen.setdefault(source, set()))
            if not self.hooked:
                atexit.register(_report_at_exit)
                self.hooked = True
        return self.entries[key]


_LEDGER = _Ledger()


def ledger_lines() -> list[str]:
    """The exit lines as they stand now: one per entry that has matched no call yet."""
    lines = []
    for entry in _LEDGER.entries.values():
        if entry.matched or entry.silenced:
            continue
        similar = closest(entry.text, entry.seen)
        ran = f"ops that ran with a similar name: {', '.join(similar)}" if similar else "no op with a similar name ran"
        lines.append(f"ditorch: warning: {entry.source} entry {entry.text!r} matched no call; {ran}")
    return lines


def _report_at_exit() -> None:
    for line in ledger_lines():
        print(line, file=sys.stderr, flush=True)


class CheckedOpList:
    """A user's operator-name list: whole-name patterns, checked against the names that can occur.

    ``entries``: the list (already split); ``source``: the variable, option or keyword it came from (messages
    name it); ``known``: a function returning the names that can occur (called once, at :meth:`check`);
    ``accepts``: an extra test for an entry that matches no known name but is valid all the same (an importable
    dotted name); ``strip_prefixes``: namespaces dropped from entries (``aten.``).
    """

    def __init__(self, entries: Iterable[str], source: str, known: Callable[[], Collection[str]], *,
                 accepts: Callable[[str], bool] | None = None, strip_prefixes: Iterable[str] = ()) -> None:
        self.source = source
        self.entries = [e.strip() for e in entries if e.strip()]
        self._prefixes = tuple(strip_prefixes)
        self.patterns = compile_op_list(self.entries, source, self._prefixes)
        self._known = known
        self._accepts = accepts
        self._ledger = [_LEDGER.entry(source, text) for text in self.entries]
        self._seen = _LEDGER.seen.setdefault(source, set())

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def unknown(self) -> list[tuple[str, list[str]]]:
        """``(entry, closest names)`` for each entry that matches no name that can occur."""
        if not self.entries:
            return []
        known = self._known()
        found = []
        for text, pattern in zip(self.entries, self.patterns, strict=True):
            name = pattern.pattern
            if name in known or (self._accepts is not None and self._accepts(text)):
                continue
            if not _PLAIN.fullmatch(name) and any(pattern.fullmatch(k) for k in known):
                continue
            found.append((text, closest(strip_op_prefix(text, self._prefixes), known)))
        return found

    def check(self, strict_mode: bool | None = None) -> list[str]:
        """Warn (one line on stderr each, once per process) about entries that can match nothing; with
        ``DITORCH_STRICT=1`` (or ``strict_mode``) raise :class:`ConfigError` naming the first. Returns the lines."""
        unknown = self.unknown()
        lines = []
        for text, near in unknown:
            hint = f" (did you mean {' or '.join(near)}?)" if near else ""
            lines.append(f"{self.source} entry {text!r} names no operator{hint}")
        if lines and (strict() if strict_mode is None else strict_mode):
            for entry in self._ledger:  # the run stops here: no exit lines about a list that never ran
                entry.silenced = True
            raise ConfigError(f"{lines[0]} [{STRICT_ENV}=1]")
        for (text, _), line in zip(unknown, lines, strict=True):
            entry = _LEDGER.entries[(self.source, text)]
            if not entry.warned:
                entry.warned = True
                print(f"ditorch: warning: {line}", file=sys.stderr, flush=True)
        return lines

    def matches(self, *names: str, record: bool = True) -> bool:
        """Whether any entry matches any of ``names`` as a whole name; remembers what matched (for the exit
        lines) unless ``record`` is false (a question about a call that is not running). Callers cache the
        answer per name."""
        if not record:
            return op_list_matches(self.patterns, *names)
        self._seen.update(names)
        hit = False
        for pattern, entry in zip(self.patterns, self._ledger, strict=True):
            if op_list_matches((pattern,), *names):
                entry.matched = True
                hit = True
        return hit
