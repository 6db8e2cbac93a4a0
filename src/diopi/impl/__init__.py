"""DIOPI implementations shipped with ditorch (``diopi.impl.<vendor>``, found through :mod:`diopi.impls`), and
the helpers their kernel wrappers share (here so that vendors and :mod:`diopi.adaptor` use one copy)."""

from __future__ import annotations

import torch

__all__ = ["written_arguments"]


def written_arguments(op: torch._ops.OpOverload) -> tuple[list[int], list[str]]:
    """The arguments ``op`` writes (in-place ``self``, ``out=``): positions of positional ones, names of
    keyword-only ones."""
    positions: list[int] = []
    names: list[str] = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            if arg.kwarg_only:
                names.append(arg.name)
            else:
                positions.append(i)
    return positions, names
