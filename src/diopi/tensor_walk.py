"""The one walker over nested arguments and results: which tensors (and other leaves) a value holds, in order,
and the value rebuilt with its leaves mapped. Containers are tuples (named tuples and ``torch.return_types``
too), lists, dicts (transformers' ``ModelOutput`` too), slices and dataclass instances, down to
:data:`MAX_DEPTH` levels; a ``torch.Size`` and anything else is a leaf. Every tool that looks into a call's
arguments (op_tools, torch_dipu, the DIOPI adaptor and vendors, module dumps) walks them here, so that all of
them see the same tensors in the same order."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["MAX_DEPTH", "call_tensors", "leaves", "map_leaves", "tensors_in"]

#: How many levels of containers are walked; a container deeper than that is a leaf.
MAX_DEPTH = 8

_Tensor = torch.Tensor
_NESTED = (list, tuple, dict, slice)


def _items(value: Any) -> Iterable[Any] | None:
    """The items of a container (None for a leaf)."""
    if isinstance(value, (list, tuple)):
        return None if isinstance(value, torch.Size) else value
    if isinstance(value, dict):
        return value.values()
    if isinstance(value, slice):
        return (value.start, value.stop, value.step)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    return None


def leaves(value: Any) -> list[Any]:
    """The leaves of ``value`` in order (tensors and every other non-container value)."""
    found: list[Any] = []

    def walk(v: Any, depth: int) -> None:
        items = None if isinstance(v, _Tensor) or depth >= MAX_DEPTH else _items(v)
        if items is None:
            found.append(v)
        else:
            for item in items:
                walk(item, depth + 1)

    walk(value, 0)
    return found


def tensors_in(value: Any, *, unique: bool = False) -> list[torch.Tensor]:
    """The tensors in ``value`` in order; with ``unique``, each tensor object once (its first place)."""
    found = [v for v in leaves(value) if isinstance(v, _Tensor)]
    if not unique or len(found) < 2:
        return found
    seen: set[int] = set()
    return [t for t in found if not (id(t) in seen or seen.add(id(t)))]


def call_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors of a call's arguments, each object once: :func:`tensors_in` with a fast path for the usual
    call, whose arguments hold no container."""
    found: list[torch.Tensor] = []
    for group in (args, kwargs.values()) if kwargs else (args,):
        for v in group:
            if isinstance(v, _Tensor):
                for t in found:
                    if t is v:
                        break
                else:
                    found.append(v)
            elif isinstance(v, _NESTED):
                return tensors_in((args, kwargs), unique=True)
    return found


def map_leaves(value: Any, fn: Callable[[Any], Any], _depth: int = 0) -> Any:
    """``value`` with ``fn`` applied to each of its :func:`leaves`; a container is rebuilt, with its own type,
    only when one of its leaves changed."""
    if isinstance(value, _Tensor) or _depth >= MAX_DEPTH:
        return fn(value)
    items = _items(value)
    if items is None:
        return fn(value)
    items = list(items)
    mapped = [map_leaves(v, fn, _depth + 1) for v in items]
    if all(a is b for a, b in zip(mapped, items, strict=True)):
        return value
    if isinstance(value, list):
        return mapped
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):  # namedtuple
            return type(value)(*mapped)
        return tuple(mapped) if type(value) is tuple else type(value)(mapped)  # torch.return_types
    if isinstance(value, slice):
        return slice(*mapped)
    if isinstance(value, dict):
        if type(value) is dict:
            return dict(zip(value, mapped, strict=True))
        out = copy.copy(value)
        for key, v in zip(value, mapped, strict=True):
            out[key] = v
        return out
    out = copy.copy(value)  # a dataclass instance
    for f, v in zip(dataclasses.fields(value), mapped, strict=True):
        object.__setattr__(out, f.name, v)
    return out
