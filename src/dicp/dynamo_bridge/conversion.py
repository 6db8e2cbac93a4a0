"""The conversion registry: which ATen operators a vendor converts to its own IR, and how.

A vendor makes one registry and registers a converter per ATen operator::

    conversions = ConversionRegistry("onnxgraph")
    register_conversion = conversions.register

    @register_conversion([aten.view.default, aten._unsafe_view])   # a packet means all of its overloads
    def view(ctx, x, size): ...

The converter's signature and what it returns belong to the vendor (its codegen calls it); the bridge only asks
the registry whether a node can be converted (:meth:`ConversionRegistry.unsupported`), to partition the graph.
"""

from __future__ import annotations

import dataclasses
import hashlib
import marshal
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["Conversion", "ConversionRegistry", "Target"]

Target = Any  # torch._ops.OpOverload | torch._ops.OpOverloadPacket | a Python callable (operator.getitem, ...)


@dataclasses.dataclass(frozen=True)
class Conversion:
    """One registered converter. ``supports(node)`` returns None when this node can be converted, else the
    reason it cannot (a dtype the vendor lacks, an argument form it does not handle); None means always."""

    target: Any
    fn: Callable[..., Any]
    supports: Callable[[torch.fx.Node], str | None] | None = None


def _expand(targets: Target | Iterable[Target]) -> list[Any]:
    items = list(targets) if isinstance(targets, (list, tuple, set, frozenset)) else [targets]
    out: list[Any] = []
    for t in items:
        if isinstance(t, torch._ops.OpOverloadPacket):
            out.extend(getattr(t, name) for name in t.overloads())
        else:
            out.append(t)
    return out


class ConversionRegistry:
    """ATen operator (overload) -> :class:`Conversion`, for one vendor."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self._table: dict[Any, Conversion] = {}
        self._version: str | None = None  # computed once, until the next registration

    def register(self, targets: Target | Iterable[Target], *,
                 supports: Callable[[torch.fx.Node], str | None] | None = None) -> Callable[[Callable], Callable]:
        """Decorator: ``fn`` converts every overload in ``targets`` (an ``OpOverloadPacket`` expands to all of
        its overloads). A second registration of an overload replaces the first."""

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            for target in _expand(targets):
                self._table[target] = Conversion(target, fn, supports)
            self._version = None
            return fn

        return decorate

    def lookup(self, target: Any) -> Conversion | None:
        """The conversion of ``target`` (an ``OpOverload`` or a Python callable), or None."""
        return self._table.get(target)

    def unsupported(self, node: torch.fx.Node) -> str | None:
        """None when ``node`` (a ``call_function`` node) can be converted, else a one-line reason naming the
        operator, e.g. ``no conversion for aten.foo.default``."""
        conversion = self._table.get(node.target)
        if conversion is None:
            return f"no conversion for {_name(node.target)}"
        if conversion.supports is not None:
            reason = conversion.supports(node)
            if reason:
                return f"{_name(node.target)}: {reason}"
        return None

    def targets(self) -> set[Any]:
        """Every registered overload."""
        return set(self._table)

    def version(self) -> str:
        """A digest of the registered converters' code objects: part of the compile cache key, so a changed
        converter never reuses an artifact built by the old one. Computed once per set of registrations."""
        if self._version is not None:
            return self._version
        digest = hashlib.sha256(self.vendor.encode())
        seen: set[int] = set()
        for target in sorted(self._table, key=_name):
            conversion = self._table[target]
            digest.update(_name(target).encode())
            for fn in (conversion.fn, conversion.supports):
                if fn is None or id(fn) in seen:
                    continue
                seen.add(id(fn))
                code = getattr(fn, "__code__", None)
                digest.update(marshal.dumps(code) if code is not None else repr(fn).encode())
        self._version = digest.hexdigest()[:16]
        return self._version


def _name(target: Any) -> str:
    """``aten.add.Tensor`` for an overload, the qualified name for a Python callable."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    module = getattr(target, "__module__", None) or ""
    return f"{module}.{getattr(target, '__qualname__', repr(target))}".lstrip(".")
