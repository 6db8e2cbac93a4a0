"""The DIOPI operator registry: functions, their signatures, reference implementations and ATen mapping.

A DIOPI function (``diopiAdd``) is the unit a vendor implements. In this Python stack a function
covers one ATen operator packet and its variants: ``diopiAdd`` serves ``aten.add.Tensor``,
``aten.add.Scalar``, ``aten.add.out`` and the in-place ``aten.add_.Tensor``. An implementation is
called with the ATen overload being run and that overload's arguments, with device tensors
replaced by the vendor's storage tensors: ``impl(op, *args, **kwargs)``.

The reference implementation runs the same ATen overload with PyTorch on the CPU.

This module is the table itself and imports no other part of diopi; :mod:`diopi.function_table` fills it,
and importing :mod:`diopi` (which any ``import diopi.<module>`` does first) loads that table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

Kernel = Callable[..., Any]


class UnknownFunctionError(KeyError):
    """Raised when a DIOPI function name is not in the registry."""


def reference_impl(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The DIOPI reference implementation: the ATen overload itself, computed by PyTorch on the CPU."""
    return op._op(*args, **kwargs)


@dataclass(frozen=True)
class DiopiFunction:
    """One operator of the interface.

    ``name`` is the DIOPI name (``diopiAdd``), ``signature`` its C-style prototype for documentation,
    ``aten`` the operator packets it serves (``("add", "add_")``; other namespaces than ``aten`` qualified,
    ``"diopi::rms_norm"``), and ``tags`` describe it (``random``: results are never compared by value;
    ``matmul``: affected by matmul precision; ``backward``: a gradient function). ``family`` is its table
    (``"activation"``), ``backward`` the DIOPI function computing its gradients (or None), ``summary`` one line
    for the reference page.
    """

    name: str
    signature: str
    aten: tuple[str, ...]
    tags: frozenset[str] = field(default_factory=frozenset)
    reference: Kernel = reference_impl
    family: str = ""
    backward: str | None = None
    summary: str = ""

    @property
    def is_random(self) -> bool:
        return "random" in self.tags


_FUNCTIONS: dict[str, DiopiFunction] = {}
_BY_ATEN_PACKET: dict[str, DiopiFunction] = {}


def register_function(fn: DiopiFunction) -> DiopiFunction:
    """Add ``fn`` to the registry; each ATen packet may belong to one function only."""
    if fn.name in _FUNCTIONS:
        raise ValueError(f"DIOPI function {fn.name!r} is registered twice")
    for packet in fn.aten:
        owner = _BY_ATEN_PACKET.get(packet)
        if owner is not None:
            raise ValueError(f"ATen operator {packet!r} is already served by {owner.name}, not {fn.name}")
    _FUNCTIONS[fn.name] = fn
    for packet in fn.aten:
        _BY_ATEN_PACKET[packet] = fn
    return fn


def get_function(name: str) -> DiopiFunction:
    """The DIOPI function called ``name``."""
    try:
        return _FUNCTIONS[name]
    except KeyError:
        raise UnknownFunctionError(f"unknown DIOPI function {name!r}") from None


def functions() -> Iterator[DiopiFunction]:
    """All registered DIOPI functions, in registration order."""
    return iter(list(_FUNCTIONS.values()))


def aten_packet_name(op: torch._ops.OpOverload | str) -> str:
    """``aten.add.Tensor`` / ``add.Tensor`` / OpOverload -> ``add``; an operator of another namespace keeps
    it: ``diopi::rms_norm`` / ``diopi.rms_norm.default`` -> ``diopi::rms_norm``."""
    if not isinstance(op, str):
        name = op._schema.name
        return name[6:] if name.startswith("aten::") else name
    if op.startswith("aten::") or op.startswith("aten."):
        return op[5:].split(".", 1)[0]
    if "::" in op:
        namespace, rest = op.split("::", 1)
        return f"{namespace}::{rest.split('.', 1)[0]}"
    parts = op.split(".")
    if len(parts) >= 2 and parts[0] in _CUSTOM_NAMESPACES:
        return f"{parts[0]}::{parts[1]}"
    return parts[0]


#: Operator namespaces besides ``aten`` whose packets the table names (``diopi::rms_norm``).
_CUSTOM_NAMESPACES = {"diopi"}


def operator_packet(packet: str) -> torch._ops.OpOverloadPacket | None:
    """The operator packet named ``packet`` (``silu``, ``diopi::rms_norm``), or None when torch has none."""
    namespace, _, name = packet.rpartition("::")
    try:
        return getattr(getattr(torch.ops, namespace or "aten"), name)
    except (AttributeError, RuntimeError):
        return None


def function_for_aten(op: torch._ops.OpOverload | str) -> DiopiFunction | None:
    """The DIOPI function serving an ATen overload, or None when the interface has none."""
    return _BY_ATEN_PACKET.get(aten_packet_name(op))


def qualified_name(op: torch._ops.OpOverload) -> str:
    """``aten::silu_backward`` / ``aten::max.other``: the overload's name in the dispatcher."""
    overload = op._overloadname
    return op._schema.name + ("" if overload == "default" else f".{overload}")


def dispatcher_overloads(packet: str) -> list[torch._ops.OpOverload]:
    """The overloads of table packet ``packet`` that the dispatcher knows (TorchScript-only ones left out)."""
    packet_op = operator_packet(packet)
    if packet_op is None:
        return []
    found = []
    for overload in packet_op.overloads():
        try:
            op = getattr(packet_op, overload)
            torch._C._dispatch_has_kernel_for_dispatch_key(qualified_name(op), "CompositeImplicitAutograd")
        except (AttributeError, RuntimeError):
            continue
        found.append(op)
    return found


def is_composite(op: torch._ops.OpOverload) -> bool:
    """Whether PyTorch decomposes ``op`` before any backend sees it (a CompositeImplicitAutograd kernel)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified_name(op), "CompositeImplicitAutograd")
