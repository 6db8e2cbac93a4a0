"""The tensors of a module call's inputs and outputs, and the autograd order of a backward node: what a module dump
(:mod:`module_tools.dump`) and a fixed-input replay (:mod:`module_tools.fixed_input`) both walk."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["MAX_DEPTH", "flatten_tensors", "sequence_nr"]

#: How deep :func:`flatten_tensors` looks into nested containers.
MAX_DEPTH = 8


def flatten_tensors(value: Any, depth: int = 0) -> list[torch.Tensor | None]:
    """The tensors in ``value`` in order: tuples, lists, dicts (transformers' ``ModelOutput`` included) and
    dataclasses are walked; anything else is skipped. ``None`` is never a tensor here."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth >= MAX_DEPTH:
        return []
    out: list[torch.Tensor | None] = []
    if isinstance(value, dict):
        items: Iterable[Any] = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = (getattr(value, f.name, None) for f in dataclasses.fields(value))
    else:
        return out
    for item in items:
        out.extend(flatten_tensors(item, depth + 1))
    return out


def sequence_nr(node: Any) -> int:
    """The sequence number of an autograd node (-1 for an object that has none): later nodes run first."""
    get = getattr(node, "_sequence_nr", None)
    return int(get()) if get is not None else -1
