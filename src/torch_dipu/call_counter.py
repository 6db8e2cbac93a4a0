"""Count the DIOPI functions whose vendor kernel runs: proof that a call reaches the vendor.

Dispatch handlers are built once per ATen overload (:mod:`torch_dipu.dispatch`). While a counter is open the
handlers of vendor kernels are rebuilt with a counting wrapper; when the last one closes they are dropped and
rebuilt plain, so nothing is paid when no one counts. CPU fallbacks and torch_dipu's own kernels (views,
allocations) are never counted.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

from torch_dipu import dispatch

_ACTIVE: list[Counter[str]] = []


def _counting(handler: dispatch.Handler, func: Any, plan: Any) -> dispatch.Handler:
    if plan.kind != "vendor" or plan.function is None:
        return handler
    name = plan.function.name

    def counted(args: tuple, kwargs: dict | None) -> Any:
        out = handler(args, kwargs)
        for counter in _ACTIVE:
            counter[name] += 1
        return out

    return counted


@contextlib.contextmanager
def count_function_calls() -> Iterator[Counter[str]]:
    """A ``Counter`` of DIOPI function names (``diopiSiluBackward``) counting each vendor kernel call made inside
    the block, forward and backward. Counters may nest; each counts the calls made while it is open."""
    counter: Counter[str] = Counter()
    if not _ACTIVE:
        dispatch.set_handler_wrapper("count", _counting)
    _ACTIVE.append(counter)
    try:
        yield counter
    finally:
        del _ACTIVE[next(i for i, c in enumerate(_ACTIVE) if c is counter)]
        if not _ACTIVE:
            dispatch.set_handler_wrapper("count", None)


__all__ = ["count_function_calls"]
