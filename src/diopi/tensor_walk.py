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
#: Leaf types met most often beside tensors (skipped without a look for container items).
_SCALARS = frozenset((int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.layout,
                      torch.memory_format, torch.Size))


def _items(value: Any) -> Iterable[Any] | None:
    """The items of a container (None for a leaf)."""
    if type(value) is list or type(value) is tuple:
        return value
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
    if isinstance(value, _Tensor):
        return [value]
    found: list[torch.Tensor] = []
    _collect(value, found, set() if unique else None, 0)
    return found


def _collect(value: Any, found: list[torch.Tensor], seen: set[int] | None, depth: int) -> None:
    items = _items(value) if depth < MAX_DEPTH else None
    if items is None:
        return
    for v in items:
        if isinstance(v, _Tensor):
            if seen is None:
                found.append(v)
            elif id(v) not in seen:
                seen.add(id(v))
                found.append(v)
        elif type(v) not in _SCALARS:
            _collect(v, found, seen, depth + 1)


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
    cls = type(value)
    if (cls is list or cls is tuple or cls is dict) and _depth < MAX_DEPTH:  # the usual containers, directly
        items = value.values() if cls is dict else value
        mapped = [map_leaves(v, fn, _depth + 1) for v in items]
        if all(a is b for a, b in zip(mapped, items, strict=True)):
            return value
        return mapped if cls is list else tuple(mapped) if cls is tuple else dict(zip(value, mapped, strict=True))
    if isinstance(value, _Tensor) or cls in _SCALARS or _depth >= MAX_DEPTH:
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
    if isinstance(value, tuple):  # a named tuple, torch.return_types
        return type(value)(*mapped) if hasattr(value, "_fields") else type(value)(mapped)
    if isinstance(value, slice):
        return slice(*mapped)
    if isinstance(value, dict):
        out = copy.copy(value)
        for key, v in zip(value, mapped, strict=True):
            out[key] = v
        return out
    out = copy.copy(value)  # a dataclass instance
    for f, v in zip(dataclasses.fields(value), mapped, strict=True):
        object.__setattr__(out, f.name, v)
    return out
