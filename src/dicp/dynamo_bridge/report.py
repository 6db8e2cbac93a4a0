"""What the bridge did, per vendor: graphs compiled, islands, eager ops, cache use, guards, precision.

:func:`compile_report` returns a copy of the counters (plain JSON-ready dicts, one per vendor name);
:func:`reset_report` clears them. An operator a vendor cannot convert prints ONE line per vendor and operator
name per process on stderr (:func:`note_eager_op`): never a silent fallback.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections import Counter
from typing import Any

__all__ = ["compile_report", "count", "count_op", "note_compile_failure", "note_eager_op", "print_islands",
           "reset_report"]

_lock = threading.Lock()
_COUNTERS: dict[str, dict[str, Any]] = {}
_ANNOUNCED: set[tuple[str, str]] = set()

#: Integer counters every vendor's report holds (the dict-valued ones: ``eager_ops``, ``rewrites``).
FIELDS = (
    "graphs_forward", "graphs_backward", "graphs_inference", "vendor_islands", "eager_islands", "eager_nodes",
    "cache_hits", "cache_misses", "cache_rebuilt", "guards_added", "shape_mismatches", "precision_checks",
    "precision_mismatches", "returned_views", "compile_failures",
)


def _entry(vendor: str) -> dict[str, Any]:
    entry = _COUNTERS.get(vendor)
    if entry is None:
        entry = {name: 0 for name in FIELDS}
        entry["eager_ops"] = Counter()
        entry["rewrites"] = Counter()
        _COUNTERS[vendor] = entry
    return entry


def count(vendor: str, field: str, n: int = 1) -> None:
    """Add ``n`` to the integer counter ``field`` of ``vendor``."""
    if field not in FIELDS:
        raise KeyError(f"dicp report: unknown counter {field!r}; known: {', '.join(FIELDS)}")
    with _lock:
        _entry(vendor)[field] += n


def count_op(vendor: str, field: str, name: str, n: int = 1) -> None:
    """Add ``n`` to ``name`` in the per-name counter ``field`` (``eager_ops`` or ``rewrites``) of ``vendor``."""
    with _lock:
        _entry(vendor)[field][name] += n


def _note_eager(vendor: str, field: str, key: str, nodes: int, line: str) -> None:
    """Add ``nodes`` eager nodes (and one to ``field``, or ``nodes`` to ``eager_ops[key]``) and print ``line`` the
    first time this vendor meets ``key`` in this process."""
    with _lock:
        entry = _entry(vendor)
        if field == "eager_ops":
            entry["eager_ops"][key] += nodes
        else:
            entry[field] += 1
        entry["eager_nodes"] += nodes
        first = (vendor, key) not in _ANNOUNCED
        _ANNOUNCED.add((vendor, key))
    if first:
        print(line, file=sys.stderr, flush=True)


def note_eager_op(vendor: str, op: str, reason: str, nodes: int) -> None:
    """Count ``nodes`` nodes of ``op`` that run eagerly; print the line that says so (once per vendor and op)."""
    _note_eager(vendor, "eager_ops", op, nodes,
                f"dicp {vendor}: {reason}; runs eagerly ({nodes} node{'s' if nodes != 1 else ''})")


def note_compile_failure(vendor: str, message: str, nodes: int) -> None:
    """Count a vendor island whose compile failed (its ``nodes`` nodes run eagerly); print ``message`` once."""
    _note_eager(vendor, "compile_failures", message, nodes,
                f"{message}; the island runs eagerly (DICP_STRICT=1 raises instead)")


def compile_report() -> dict[str, dict[str, Any]]:
    """Counters per vendor name: ``graphs_forward``/``graphs_backward``/``graphs_inference``,
    ``vendor_islands``, ``eager_islands``, ``eager_nodes``, ``eager_ops`` (op name -> nodes), ``cache_hits``,
    ``cache_misses``, ``cache_rebuilt``, ``guards_added``, ``precision_checks``, ``precision_mismatches``,
    ``returned_views`` (views of graph inputs a graph returns: PyTorch's views, no op), ``compile_failures``
    (vendor islands whose compile failed and that run eagerly), ``rewrites`` (pass name -> rewrites). A copy:
    plain dicts, JSON-ready."""
    with _lock:
        out = copy.deepcopy(_COUNTERS)
    for entry in out.values():
        entry["eager_ops"] = dict(entry["eager_ops"])
        entry["rewrites"] = dict(entry["rewrites"])
    return out


def reset_report(*, announced: bool = False) -> None:
    """Clear every counter; ``announced=True`` also forgets which eager ops were already printed."""
    with _lock:
        _COUNTERS.clear()
        if announced:
            _ANNOUNCED.clear()


def print_islands(vendor: str, kind: str, vendor_sizes: list[int], eager: list[list[tuple[str, str]]]) -> None:
    """The ``DICP_REPORT=1`` listing of one compiled graph on stderr: a headline, then one line per eager island
    with each node's name and the reason it stays eager (``eager``: per island, ``(node name, reason)`` pairs)."""
    sizes = ", ".join(str(n) for n in vendor_sizes) or "none"
    lines = [f"dicp {vendor}: {kind} graph: {len(vendor_sizes)} vendor island(s) (nodes: {sizes}), "
             f"{len(eager)} eager island(s)"]
    lines += [f"  eager island {i}: " + "; ".join(f"{name}: {reason}" for name, reason in island)
              for i, island in enumerate(eager, 1)]
    print("\n".join(lines), file=sys.stderr, flush=True)
