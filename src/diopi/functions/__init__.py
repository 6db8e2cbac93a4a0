"""The DIOPI function table, one module per family.

Each family module defines ``FAMILY`` and ``TABLE``, one function per line::

    name | ATen packets | tags | backward function | summary

``packets`` are operator packet names: bare for ``aten`` (``silu silu_``), qualified for other
namespaces (``diopi::rotary_embedding``). ``tags``: ``random`` (never compared by value), ``matmul``
(affected by a device's matmul precision), ``backward`` (a gradient function). ``backward function`` names the
DIOPI function that computes this one's gradients, where there is one. The last three columns may be empty.
A family module may also define ``REFERENCES``: DIOPI name -> reference kernel, for functions whose operator
has no CPU kernel.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass

#: The families, in the order the reference page lists them.
FAMILIES = (
    "elementwise", "activation", "reduction", "matmul", "conv_pool", "norm", "loss", "indexing", "shape", "sort",
    "random", "optim", "vision", "llm", "rnn",
)


@dataclass(frozen=True)
class Row:
    """One parsed table line."""

    family: str
    name: str
    packets: tuple[str, ...]
    tags: frozenset[str]
    backward: str | None
    summary: str


def parse_table(family: str, text: str) -> Iterator[Row]:
    """The rows of one family's ``TABLE``; a malformed line raises ValueError naming the family and line."""
    for number, line in enumerate(text.strip().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 2 or len(parts) > 5 or not parts[0].startswith("diopi") or not parts[1]:
            raise ValueError(f"diopi.functions.{family} line {number}: expected 'name | packets | tags | "
                             f"backward | summary', got {line!r}")
        parts += [""] * (5 - len(parts))
        name, packets, tags, backward, summary = parts
        yield Row(family, name, tuple(packets.split()), frozenset(tags.split()), backward or None, summary)


def rows() -> Iterator[tuple[Row, dict]]:
    """Every row of every family with its module's ``REFERENCES`` mapping."""
    for family in FAMILIES:
        module = importlib.import_module(f"diopi.functions.{family}")
        if family != module.FAMILY:
            raise ValueError(f"diopi.functions.{family} declares FAMILY = {module.FAMILY!r}")
        references = getattr(module, "REFERENCES", {})
        for row in parse_table(family, module.TABLE):
            yield row, references
