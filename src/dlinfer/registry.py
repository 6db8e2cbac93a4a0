"""The kernel registry: which function computes a dlinfer operator for the tensors' device.

Every operator has a *reference* kernel in plain torch (``dlinfer.reference``, whose modules register them with
:func:`reference` as ``import dlinfer`` imports them), which runs on any device whose PyTorch backend has the ATen
operators it uses. A vendor adds its own kernels per
device type::

    def register(registry: KernelRegistry) -> None:        # the entry point, group "dlinfer.vendors"
        @registry.register("rms_norm", device_type="npu", name="ascend")
        def rms_norm(hidden_states, weight, epsilon): ...

A kernel takes exactly the arguments of the operator's schema (``dlinfer.ops.llm``) and returns what the schema
returns. Vendors are loaded from the entry point group ``dlinfer.vendors`` on the first call (each entry point is
a callable taking the registry); a vendor that lacks an operator gets the reference kernel, never a KeyError.
``DLINFER_KERNELS=reference`` forces the reference everywhere.

Every call is counted per (operator, kernel name): :func:`op_counts`, :func:`kernel_counts`,
:func:`reset_counts`; tests use them to prove which kernels ran.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import torch

from .config import dlinfer_config

__all__ = ["REFERENCE", "KernelRegistry", "kernel_counts", "op_counts", "reference", "registry", "reset_counts"]

Kernel = Callable[..., Any]
REFERENCE = "reference"
ENTRY_POINT_GROUP = "dlinfer.vendors"


class KernelRegistry:
    """(operator name, device type) -> kernel, with the reference kernel behind every operator."""

    def __init__(self) -> None:
        self._reference: dict[str, Kernel] = {}
        self._vendor: dict[tuple[str, str], tuple[str, Kernel]] = {}
        self._loaded = False
        #: (op, device type) -> (kernel name, kernel, counter key (op, kernel name))
        self._resolved: dict[tuple[str, str], tuple[str, Kernel, tuple[str, str]]] = {}
        self.counts: Counter[tuple[str, str]] = Counter()

    # -- registration -------------------------------------------------------------------------------------------
    def register_reference(self, op: str) -> Callable[[Kernel], Kernel]:
        """Decorator: ``fn`` is the plain-torch reference kernel of ``op``."""

        def decorate(fn: Kernel) -> Kernel:
            self._reference[op] = fn
            self._resolved.clear()
            return fn

        return decorate

    def register(self, op: str, *, device_type: str, name: str) -> Callable[[Kernel], Kernel]:
        """Decorator: ``fn`` computes ``op`` for tensors on ``device_type``; ``name`` (the vendor) is what the
        counters report. A second registration for the same (op, device type) replaces the first."""

        def decorate(fn: Kernel) -> Kernel:
            self._vendor[(op, device_type)] = (name, fn)
            self._resolved.clear()
            return fn

        return decorate

    # -- lookup -------------------------------------------------------------------------------------------------
    def load_vendors(self) -> None:
        """Run every ``dlinfer.vendors`` entry point (once per registry). A vendor whose registration fails is reported
        with a warning and skipped: the reference kernels still serve."""
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()(self)
            except Exception as exc:  # a broken vendor package must not take the reference kernels down
                warnings.warn(f"dlinfer vendor {ep.name!r} ({ep.value}) failed to register: {exc}", stacklevel=2)
        self._resolved.clear()

    def kernel(self, op: str, device_type: str) -> tuple[str, Kernel]:
        """(kernel name, kernel) that computes ``op`` for tensors on ``device_type``."""
        key = (op, device_type)
        found = self._resolved.get(key)
        if found is None:
            self.load_vendors()
            chosen = None if dlinfer_config().kernels == REFERENCE else self._vendor.get(key)
            if chosen is None:
                if op not in self._reference:
                    raise KeyError(f"dlinfer operator {op!r} has no reference kernel")
                chosen = (REFERENCE, self._reference[op])
            found = self._resolved[key] = (chosen[0], chosen[1], (op, chosen[0]))
        return found[0], found[1]

    def vendor_for(self, device_type: str) -> str:
        """The name of the vendor that registered kernels for ``device_type`` (``"reference"`` if none)."""
        self.load_vendors()
        if dlinfer_config().kernels != REFERENCE:
            for (_, dev), (name, _) in self._vendor.items():
                if dev == device_type:
                    return name
        return REFERENCE

    def dispatch(self, op: str, device_type: str, *args: Any) -> Any:
        """Run ``op`` with the kernel for ``device_type`` and count the call."""
        found = self._resolved.get((op, device_type))
        if found is None:
            self.kernel(op, device_type)
            found = self._resolved[(op, device_type)]
        self.counts[found[2]] += 1
        return found[1](*args)

    def forget(self) -> None:
        """Drop the resolved-kernel cache (tests that change ``DLINFER_KERNELS`` call this after reset_config)."""
        self._resolved.clear()


registry = KernelRegistry()
#: ``@reference("op")``: ``fn`` is the plain-torch reference kernel of ``op`` in :data:`registry`.
reference = registry.register_reference


def op_counts() -> dict[str, int]:
    """Calls per operator since the last :func:`reset_counts`, whatever kernel ran them."""
    out: Counter[str] = Counter()
    for (op, _), n in registry.counts.items():
        out[op] += n
    return dict(out)


def kernel_counts() -> dict[tuple[str, str], int]:
    """Calls per (operator, kernel name), e.g. ``{("rms_norm", "reference"): 12}``."""
    return dict(registry.counts)


def reset_counts() -> None:
    """Zero the call counters."""
    registry.counts.clear()


def device_type_of(*args: Any) -> str:
    """The device type of the first tensor among ``args`` (lists of tensors are looked into); ``cpu`` if none."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    return b.device.type
    return "cpu"
