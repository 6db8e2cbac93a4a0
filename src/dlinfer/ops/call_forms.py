"""Older LMDeploy releases' call forms of an operator, told apart from the current one by the arguments.

Where an older release put an argument of another kind at a place (an ``int`` where the current form takes a
tensor of lengths), or named an argument the current form lacks, the call is the older form's: the wrapper made
by :func:`accept_older_form` routes it there, the older form converts it, and no argument is ever bound to
another's meaning. The decision looks at one or two arguments, without exceptions or ``inspect`` binding, so it
costs nothing measurable per call and traces under ``torch.compile``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["MISSING", "accept_older_form", "argument"]

MISSING = object()


def argument(args: tuple, kwargs: dict[str, Any], index: int, name: str) -> Any:
    """The argument at position ``index`` or keyword ``name`` (:data:`MISSING` when neither was given)."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, MISSING)


def accept_older_form(current: Callable[..., Any], older: Callable[..., Any], release: str,
                      is_older: Callable[[tuple, dict[str, Any]], bool]) -> Callable[..., Any]:
    """``current`` (the public operator: its name, docstring and signature) that hands a call to ``older``, the
    form ``release`` used, when ``is_older(args, kwargs)``."""
    name = current.__name__.lstrip("_")

    @functools.wraps(current)
    def call(*args: Any, **kwargs: Any) -> Any:
        if is_older(args, kwargs):
            return older(*args, **kwargs)
        return current(*args, **kwargs)

    call.__signature__ = inspect.signature(current)  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = (current.__doc__ or "") + (
        f"\n\n    The call form of {release} ({name}{inspect.signature(older)}) is accepted too.")
    return call
