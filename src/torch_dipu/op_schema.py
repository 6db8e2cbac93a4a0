"""Facts read from an operator's schema, shared by kernel selection, dispatch and the claims."""

from __future__ import annotations

import torch


def returns_view(schema: torch._C.FunctionSchema) -> bool:
    """Whether an overload returns a view of an input (an alias that it does not write)."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
