"""Run callbacks when chosen environment variables change through ``os.environ``.

A setting read once at import can still follow the program's own changes without reading the environment
on every use: :func:`watch` registers ``callback(name, value)`` for variable ``name``, and from then on every
change of that name through ``os.environ`` calls it after the change is stored, with the new value (None
when the variable was deleted)::

    handle = env_watch.watch("DIPU_DUMP_OP_ARGS", lambda name, value: print(name, "is now", value))
    os.environ["DIPU_DUMP_OP_ARGS"] = "2"      # prints: DIPU_DUMP_OP_ARGS is now 2
    del os.environ["DIPU_DUMP_OP_ARGS"]        # prints: DIPU_DUMP_OP_ARGS is now None
    env_watch.unwatch(handle)

How: while anything is watched, ``os.environ``'s class is a subclass of ``os._Environ`` whose
``__setitem__`` and ``__delitem__`` call the callbacks after doing their usual work. ``os.environ`` stays the
same object and behaves as before otherwise; ``pop``, ``setdefault``, ``update``, ``clear`` and pytest's
``monkeypatch.setenv`` / ``delenv`` (and their undo) go through those two methods, so they notify too.
Not seen: ``os.putenv`` / ``os.unsetenv`` (they bypass ``os.environ``, which does not see them either) and
changes made by C code. When the last watch is removed the class is put back. If some other code already
replaced ``os.environ``'s class, it is left alone and no change is seen.

A callback that raises (a bad value) leaves the assignment done, the other callbacks still run, and the
first error is raised from the assignment itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

#: ``callback(name, value)``: ``value`` is the new value, or None when the variable was deleted.
Callback = Callable[[str, "str | None"], None]

_LOCK = threading.Lock()
_WATCHES: dict[int, tuple[str, Callback]] = {}
_NEXT_HANDLE = 1


def _notify(key: object) -> None:
    if type(key) is not str:
        return
    with _LOCK:
        callbacks = [cb for name, cb in _WATCHES.values() if name == key]
    if not callbacks:
        return
    value = os.environ.get(key)
    error: BaseException | None = None
    for callback in callbacks:
        try:
            callback(key, value)
        except Exception as exc:  # the others still run; the first error reaches the assignment
            if error is None:
                error = exc
    if error is not None:
        raise error


class _WatchedEnviron(os._Environ):
    """``os._Environ`` that calls the registered callbacks after a watched variable is set or deleted."""

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        _notify(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        _notify(key)


def watch(name: str, callback: Callback) -> int:
    """Call ``callback(name, value)`` after each change of environment variable ``name`` through
    ``os.environ``; returns a handle for :func:`unwatch`."""
    global _NEXT_HANDLE
    with _LOCK:
        handle = _NEXT_HANDLE
        _NEXT_HANDLE += 1
        _WATCHES[handle] = (name, callback)
        if type(os.environ) is os._Environ:
            os.environ.__class__ = _WatchedEnviron
    return handle


def unwatch(handle: int) -> None:
    """Stop the watch ``handle`` (unknown handles are ignored); the last one gives ``os.environ`` its class
    back."""
    with _LOCK:
        _WATCHES.pop(handle, None)
        if not _WATCHES and type(os.environ) is _WatchedEnviron:
            os.environ.__class__ = os._Environ


def watched() -> list[str]:
    """The names watched now (one entry per watch)."""
    with _LOCK:
        return [name for name, _ in _WATCHES.values()]


__all__ = ["Callback", "unwatch", "watch", "watched"]
