"""A record of every attribute the mocking layer replaced, so that :func:`ditorch.mocking.uninstall` can undo it."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patches:
    """Set attributes on modules and classes, remembering what was there before."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """``setattr(owner, name, value)``; for a class only its own ``__dict__`` entry is remembered (an
        inherited attribute is deleted again on restore, not copied into the class)."""
        self._saved.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)

    def restore(self) -> None:
        """Undo every :meth:`set`, newest first."""
        while self._saved:
            owner, name, old = self._saved.pop()
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
