"""Classes that stand in for another class: ``isinstance``/``issubclass`` against the stand-in answer as
against the class it replaces, so code that checks types keeps working after the mapping swaps a class."""

from __future__ import annotations

from typing import Any


def mirroring(original: type, meta: type = type) -> type:
    """A metaclass (derived from ``meta``) whose classes answer ``isinstance(obj, cls)`` and
    ``issubclass(sub, cls)`` as ``original`` does."""

    class Mirror(meta):  # type: ignore[misc, valid-type]
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, original)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, original)

    return Mirror
