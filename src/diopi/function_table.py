"""Fill the DIOPI registry from the family tables of :mod:`diopi.functions`.

A function's reference is the operator on the CPU, except where the CPU build lacks the operator
(:mod:`diopi.host_kernels` and a family's ``REFERENCES``). The signature documented for each function is the
schema of the first packet it serves, in DIOPI naming.
"""

from __future__ import annotations

import diopi.custom_ops  # noqa: F401  (defines the diopi:: operators the tables name)
from diopi.functions import rows
from diopi.host_kernels import REFERENCES
from diopi.registry import DiopiFunction, operator_packet, reference_impl, register_function


def _signature(name: str, packet: str) -> str:
    """A DIOPI-style prototype derived from the schema of ``packet`` (``silu`` or ``diopi::rms_norm``)."""
    packet_obj = operator_packet(packet)
    if packet_obj is None:
        return f"{name}(...)"
    overloads = sorted(packet_obj.overloads(), key=lambda o: (o != "Tensor", o != "default", o))
    schema = getattr(packet_obj, overloads[0])._schema
    args = ", ".join(f"{a.type} {a.name}" for a in schema.arguments)
    return f"{name}({args})"


def _load() -> None:
    for row, references in rows():
        register_function(
            DiopiFunction(
                name=row.name,
                signature=_signature(row.name, row.packets[0]),
                aten=row.packets,
                tags=row.tags,
                reference=references.get(row.name) or REFERENCES.get(row.name, reference_impl),
                family=row.family,
                backward=row.backward,
                summary=row.summary,
            )
        )


_load()
