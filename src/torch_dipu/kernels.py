"""Kernel selection for one ATen overload: native (views, memory), vendor (DIOPI), or CPU fallback."""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import diopi
from diopi import DiopiFunction
from diopi.op_names import CheckedOpList
from diopi.registry import dispatcher_overloads, is_composite, reference_impl
from torch_dipu import claims
from torch_dipu.config import checked_op_list
from torch_dipu.op_schema import returns_view
from torch_dipu.state import DipuState

log = logging.getLogger("torch_dipu")

# Operators torch_dipu implements itself, as DIPU does for views and memory allocation.
NATIVE_PACKETS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "_local_scalar_dense",
        "_unsafe_view",
        "is_pinned",
        "_pin_memory",
        "record_stream",
        "is_same_size",
        "_has_compatible_shallow_copy_type",
    }
)


@dataclass(frozen=True)
class KernelPlan:
    """How an overload runs: ``kind`` is native, vendor or fallback; ``reason`` explains a fallback."""

    kind: str
    kernel: Callable[..., Any]
    function: DiopiFunction | None
    reason: str = ""

    @property
    def needs_device_rng(self) -> bool:
        """A random kernel without a generator argument: it must run on the device's generator."""
        return self.function is not None and self.function.is_random

    @property
    def direct(self) -> bool:
        """True when the kernel is the ATen overload itself (reference, fallback or native)."""
        return self.kernel in (reference_impl, _run_on_storage)


def op_names(func: torch._ops.OpOverload) -> tuple[str, str]:
    """``("add.Tensor", "add")``; the default overload is named by its packet alone (``"mm"``)."""
    packet = diopi.aten_packet_name(func)
    overload = func._overloadname
    return (packet if overload == "default" else f"{packet}.{overload}", packet)


def matches(names: CheckedOpList, func: torch._ops.OpOverload, record: bool = True) -> bool:
    """Whether an entry of ``names`` matches the overload name or its packet name (``record``: the call runs,
    so a match counts for the list's exit lines)."""
    full, packet = op_names(func)
    return names.matches(full, packet, f"{packet}.{func._overloadname}", record=record)


def _run_on_storage(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """Native and CPU-fallback kernel: the ATen overload itself, on the storage tensors. Storage tensors
    are host tensors, so the CPU fallback needs no copies."""
    return op._op(*args, **kwargs)


def _record_stream(op: torch._ops.OpOverload, tensor: torch.Tensor, stream: torch.Stream) -> None:
    """``Tensor.record_stream``: nothing to record. Vendor kernels run in issue order whatever their stream, so
    memory freed after a call is never reused while another stream's work on it is still queued."""
    if stream.device.type != "dipu":
        raise RuntimeError(f"record_stream: {stream} is not a stream of the dipu device")


# Native packets with a kernel of their own (the others run the ATen overload on the storage tensors).
_NATIVE_KERNELS: dict[str, Callable[..., Any]] = {"record_stream": _record_stream}


@contextlib.contextmanager
def host_rng_from(generator: torch.Generator) -> Iterator[None]:
    """Let a random kernel that takes no generator argument (it draws from the host's default
    generator) draw from ``generator`` instead, leaving the host's random stream untouched."""
    host_state = torch.get_rng_state()
    torch.set_rng_state(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(torch.get_rng_state())
        torch.set_rng_state(host_state)


def select(func: torch._ops.OpOverload, state: DipuState) -> KernelPlan:
    """Choose how ``func`` runs on dipu and log CPU fallbacks once when asked to."""
    packet = diopi.aten_packet_name(func)
    if packet in NATIVE_PACKETS or returns_view(func._schema):
        return KernelPlan("native", _NATIVE_KERNELS.get(packet, _run_on_storage), None)
    fn = diopi.function_for_aten(func)
    # The CPU fallback runs the ATen operator on the host; for the few the CPU build lacks (CUDA-only fused
    # kernels), the DIOPI reference implementation is the host's way to compute it.
    host = fn.reference if fn is not None and fn.reference is not reference_impl else _run_on_storage
    if matches(state.force_fallback_patterns, func):
        plan = KernelPlan("fallback", host, fn, "forced by DIPU_FORCE_FALLBACK_OPS_LIST")
    elif fn is None:
        plan = KernelPlan("fallback", host, None, "no DIOPI function maps this operator")
    else:
        kernel = state.runtime.kernel(fn, func)
        if kernel is None:
            plan = KernelPlan("fallback", host, fn, f"{state.runtime.name} does not implement {fn.name}")
        else:
            plan = KernelPlan("vendor", kernel, fn)
    if plan.kind == "fallback":
        name = op_names(func)[0]
        first = name not in state.fallback_ops  # log once per process, even when handlers are rebuilt
        state.fallback_ops.add(name)
        if state.config.log_fallback and first:
            print(f"[torch_dipu] fallback to CPU: aten.{name} ({plan.reason})", flush=True)
        log.debug("fallback to CPU: aten.%s (%s)", name, plan.reason)
    return plan


def decomposes_before_dispatch(name: str) -> bool:
    """Whether ATen operator ``name`` (``conv2d``) is CompositeImplicitAutograd in all its overloads and
    torch_dipu claims none of them (:mod:`torch_dipu.claims`): PyTorch decomposes it before any device sees it,
    so it never runs as itself on dipu."""
    overloads = dispatcher_overloads(name)
    return bool(overloads) and all(is_composite(op) and not claims.is_claimed(op) for op in overloads)


def parse_fallback_list(entries: list[str]) -> CheckedOpList:
    """``DIPU_FORCE_FALLBACK_OPS_LIST`` entries, checked (:func:`torch_dipu.config.checked_op_list`); warn about
    names of operators PyTorch decomposes before they reach a device."""
    names = checked_op_list(entries, "DIPU_FORCE_FALLBACK_OPS_LIST")
    for pattern in names.patterns:
        name = pattern.pattern
        if re.fullmatch(r"\w+", name) and decomposes_before_dispatch(name):
            warnings.warn(
                f"DIPU_FORCE_FALLBACK_OPS_LIST entry {name!r} never matches: PyTorch decomposes aten.{name} "
                "before it reaches a device (conv2d runs as convolution). Name the "
                "operators it runs as; DIPU_LOG_FALLBACK_INFO=1 or torch_dipu.fallback_ops() list them.",
                stacklevel=2,
            )
    return names


__all__ = [
    "KernelPlan", "NATIVE_PACKETS", "host_rng_from", "matches", "op_names", "parse_fallback_list", "reference_impl",
    "returns_view", "select",
]
