"""Which DIOPI functions a call on dipu can reach: per table packet, how it gets to the vendor, or why not.

A packet reaches the vendor when one of its overloads gets to ``DipuTensor.__torch_dispatch__`` as itself
(it has a kernel of its own, ``dispatch``) or is claimed by torch_dipu (:mod:`torch_dipu.claims`, ``claimed``)
and the active vendor implements its function without ``DIPU_FORCE_FALLBACK_OPS_LIST`` sending it to the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import diopi
from diopi import DiopiFunction
from torch_dipu import claims, kernels
from torch_dipu.state import DipuState, get_state


@dataclass(frozen=True)
class PacketReach:
    """How one packet of a DIOPI function reaches the vendor on dipu.

    ``routes``: ``dispatch`` (an overload reaches ``__torch_dispatch__`` as itself) and/or ``claimed``; empty when
    none does. ``reason`` says why an unreachable packet is not reached; for a reachable one it lists the
    overloads PyTorch still decomposes, if any.
    """

    function: str
    packet: str
    reachable: bool
    routes: tuple[str, ...]
    reason: str = ""


def _route(op: torch._ops.OpOverload) -> tuple[str, str]:
    """(route, "") for an overload that reaches dispatch as itself, ("", why not) otherwise."""
    if not claims.is_composite(op):
        return "dispatch", ""
    if claims.is_claimed(op):
        return "claimed", ""
    why = claims.unclaimable_reason(op)
    if why is None:
        why = "has another AutogradPrivateUse1 kernel" if torch._C._dispatch_has_kernel_for_dispatch_key(
            claims.qualified_name(op), "AutogradPrivateUse1") else "not claimed"
    return "", f"{claims.qualified_name(op)} decomposes: {why}"


def packet_reach(fn: DiopiFunction, packet: str, state: DipuState | None = None) -> PacketReach:
    """Whether ``packet`` of ``fn`` reaches the active vendor on dipu, and how (or why not)."""
    state = state or get_state()
    if diopi.operator_packet(packet) is None:
        return PacketReach(fn.name, packet, False, (), f"torch {torch.__version__} has no operator {packet}")
    overloads = claims.dispatcher_overloads(packet)
    routed = [(op, *_route(op)) for op in overloads]
    reaching = [op for op, route, _ in routed if route]
    routes = tuple(sorted({route for _, route, _ in routed if route}))
    decomposed = "; ".join(why for _, route, why in routed if not route)
    if not reaching:
        return PacketReach(fn.name, packet, False, (), decomposed or f"{packet} has no dispatcher overload")
    if all(kernels.matches(state.force_fallback_patterns, op, record=False) for op in reaching):
        return PacketReach(fn.name, packet, False, routes, "forced to the CPU by DIPU_FORCE_FALLBACK_OPS_LIST")
    if all(state.runtime.kernel(fn, op) is None for op in reaching):
        return PacketReach(fn.name, packet, False, routes, f"{state.runtime.name} does not implement {fn.name}")
    return PacketReach(fn.name, packet, True, routes, decomposed)


def reachability() -> dict[str, tuple[PacketReach, ...]]:
    """For every DIOPI function (table order), how each of its packets reaches the vendor on dipu."""
    state = get_state()
    return {fn.name: tuple(packet_reach(fn, p, state) for p in fn.aten) for fn in diopi.functions()}


def unreachable() -> list[PacketReach]:
    """The packets of the table that no call on dipu can take to the vendor."""
    return [p for packets in reachability().values() for p in packets if not p.reachable]


__all__ = ["PacketReach", "packet_reach", "reachability", "unreachable"]
