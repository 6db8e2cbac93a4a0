"""Vendor implementations of DIOPI: the interface, per-function registration, and discovery.

An implementation is any object with a ``name`` and ``kernel(fn, op) -> Kernel | None``: the kernel that
runs DIOPI function ``fn`` for ATen overload ``op`` (None: not implemented). A kernel is called
``kernel(op, *host_args, **kwargs)`` on host tensors, exactly like :attr:`diopi.DiopiFunction.reference`.

A vendor ships its implementation as a package registered under the ``diopi.impls`` entry point group; the
entry point names a factory called with keyword options::

    [project.entry-points."diopi.impls"]
    myvendor = "myvendor_diopi:impl"

The simplest implementation registers kernels per function (:class:`FunctionImpls`). An implementation may
ship an adaptor config (attribute ``adaptor_config``: a path): :func:`load` then wraps it with
:func:`diopi.adaptor.adapt`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from diopi.adaptor import adapt, load_config
from diopi.registry import DiopiFunction, Kernel, get_function

__all__ = ["GROUP", "FunctionImpls", "Implementation", "ImplementationError", "Kernel", "UnsupportedDtypeError",
           "available", "load"]

#: The entry point group vendor implementations register under.
GROUP = "diopi.impls"


class UnsupportedDtypeError(RuntimeError):
    """An operator or tensor uses a dtype the implementation does not support (e.g. float64 on many NPUs).

    A RuntimeError, not a TypeError: Python's operator syntax (``a + b``) would turn a TypeError into
    "unsupported operand type(s)" and hide which operator and dtype are at fault.
    """


class ImplementationError(RuntimeError):
    """An implementation that is unknown, or whose entry point cannot be loaded or returns no implementation."""


@runtime_checkable
class Implementation(Protocol):
    """What a vendor implementation provides."""

    name: str

    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        """The kernel running ``fn`` for overload ``op``, or None when the vendor does not implement it."""
        ...


class FunctionImpls:
    """An implementation made of kernels registered per DIOPI function::

        impl = FunctionImpls("myvendor")

        @impl.register("diopiAdd")
        def add(op, *args, **kwargs): ...

        impl.register("diopiMm", my_mm)

    A function's kernel serves every ATen overload of the function (``op`` tells which one is called).
    """

    def __init__(self, name: str, kernels: Mapping[str, Kernel] | None = None,
                 adaptor_config: str | Path | None = None) -> None:
        self.name = name
        self.adaptor_config = adaptor_config
        self._kernels: dict[str, Kernel] = {}
        for function, kernel in (kernels or {}).items():
            self.register(function, kernel)

    def register(self, function: str, kernel: Kernel | None = None) -> Any:
        """Register ``kernel`` for DIOPI function ``function`` (a known name, else ``UnknownFunctionError``);
        without ``kernel``, a decorator."""
        get_function(function)
        if kernel is None:
            def decorator(k: Kernel) -> Kernel:
                self._kernels[function] = k
                return k
            return decorator
        self._kernels[function] = kernel
        return kernel

    def functions(self) -> list[str]:
        """The names of the functions this implementation has a kernel for."""
        return sorted(self._kernels)

    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        return self._kernels.get(fn.name)

    def __repr__(self) -> str:
        return f"FunctionImpls({self.name!r}, {len(self._kernels)} functions)"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def available() -> list[str]:
    """The names of the installed implementations (entry point group ``diopi.impls``)."""
    return sorted(_entry_points())


def load(name: str, *, apply_adaptor: bool = True, **options: Any) -> Implementation:
    """The implementation ``name`` created with ``options`` (vendor switches, e.g. droplet's ``faults``).

    An unknown name raises :class:`ImplementationError` listing the available ones; so does an entry point
    that cannot be imported or that does not give an implementation. Errors of the factory itself (a bad
    option) are the vendor's own. When the implementation has an ``adaptor_config`` and ``apply_adaptor`` is
    true, its kernels are wrapped by :func:`diopi.adaptor.adapt`.
    """
    found = _entry_points()
    if name not in found:
        raise ImplementationError(f"unknown DIOPI implementation {name!r}; available: "
                                  f"{', '.join(sorted(found)) or '(none installed)'}")
    ep = found[name]
    try:
        factory: Callable[..., Any] = ep.load()
    except Exception as exc:
        raise ImplementationError(f"DIOPI implementation {name!r}: entry point {ep.value!r} cannot be loaded: "
                                  f"{type(exc).__name__}: {exc}") from exc
    if not callable(factory):
        raise ImplementationError(f"DIOPI implementation {name!r}: entry point {ep.value!r} is not callable")
    impl = factory(**options)
    if not isinstance(impl, Implementation):
        raise ImplementationError(f"DIOPI implementation {name!r}: entry point {ep.value!r} returned "
                                  f"{type(impl).__name__}, which has no name and kernel(fn, op)")
    config = getattr(impl, "adaptor_config", None)
    if apply_adaptor and config is not None:
        impl = adapt(impl, load_config(config))
    return impl
