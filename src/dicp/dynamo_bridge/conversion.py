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
import functools
import hashlib
import re
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = ["Conversion", "ConversionRegistry", "Target", "module_source_digest", "stable_repr"]

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
        """A digest of the registered converters: part of the compile cache key, so a changed converter never
        reuses an artifact built by the old one. Made only of content that is the same in every process (so
        a second process hits the cache): each target's name, each converter's and ``supports``' qualified name
        and code (bytecode, constants, names, defaults, closure values; no addresses, no file paths, no line
        numbers), and the source text of the modules that define them (a changed helper counts too).
        Computed once per set of registrations."""
        if self._version is not None:
            return self._version
        digest = hashlib.sha256(self.vendor.encode())
        modules: set[str] = set()
        for target in sorted(self._table, key=_name):
            conversion = self._table[target]
            digest.update(b"\0" + _name(target).encode())
            for fn in (conversion.fn, conversion.supports):
                digest.update(b"\0" + _callable_text(fn, modules, 0).encode())
        for module in sorted(modules):
            digest.update(b"\0" + module.encode() + b"\0" + module_source_digest(module).encode())
        self._version = digest.hexdigest()[:16]
        return self._version


def _name(target: Any) -> str:
    """``aten.add.Tensor`` for an overload, ``higher_order.auto_functionalized`` for a higher-order operator,
    the qualified name for a Python callable (of its type for an object without one: never a repr that holds
    an address, which would differ from process to process)."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"{getattr(target, 'namespace', 'higher_order')}.{target.name()}"
    qualname = getattr(target, "__qualname__", None)
    if not isinstance(qualname, str):
        target = type(target)
        qualname = target.__qualname__
    module = getattr(target, "__module__", None) or ""
    return f"{module}.{qualname}".lstrip(".")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_repr(value: Any) -> str:
    """``repr(value)`` without the ``at 0x...`` addresses of default reprs (they differ between processes)."""
    return _ADDRESS.sub("", repr(value))


_MAX_DEPTH = 6


def _callable_text(fn: Any, modules: set[str], depth: int) -> str:
    """A text of ``fn`` that is equal in every process running the same code: qualified name, code, defaults
    and closure values. Adds the modules defining Python functions to ``modules``."""
    if fn is None:
        return "-"
    if depth > _MAX_DEPTH:
        return _name(fn)
    if isinstance(fn, functools.partial):
        return (f"partial({_callable_text(fn.func, modules, depth + 1)}, "
                f"{_value_text(fn.args, modules, depth + 1)}, {_value_text(fn.keywords, modules, depth + 1)})")
    if isinstance(fn, types.MethodType):
        return f"method({_callable_text(fn.__func__, modules, depth + 1)}, {_name(type(fn.__self__))})"
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return _name(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str):
        modules.add(module)
    cells = [c.cell_contents if _cell_full(c) else "<empty>" for c in (getattr(fn, "__closure__", None) or ())]
    defaults = _value_text((fn.__defaults__, fn.__kwdefaults__), modules, depth + 1)
    closure = _value_text(cells, modules, depth + 1)
    return f"{_name(fn)}|{_code_text(code, modules, depth)}|defaults {defaults}|closure {closure}"


def _cell_full(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _code_text(code: types.CodeType, modules: set[str], depth: int) -> str:
    """Bytecode, constants (nested code included, sets sorted), names and signature shape of ``code``; no
    file name or line numbers, so moving a function does not change it, and no ``marshal`` (whose output
    depends on reference counts)."""
    consts = _value_text(code.co_consts, modules, depth + 1)
    return (f"{code.co_name} {code.co_argcount}/{code.co_posonlyargcount}/{code.co_kwonlyargcount} "
            f"flags {code.co_flags} code {code.co_code.hex()} consts {consts} names {code.co_names} "
            f"vars {code.co_varnames} free {code.co_freevars} cell {code.co_cellvars}")


def _value_text(value: Any, modules: set[str], depth: int) -> str:
    """A process-independent text of a constant, a default or a closure value."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if depth > _MAX_DEPTH:
        return type(value).__name__
    if isinstance(value, types.CodeType):
        return _code_text(value, modules, depth)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_value_text(v, modules, depth + 1) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_value_text(v, modules, depth + 1) for v in value)) + "}"
    if isinstance(value, dict):
        items = sorted(f"{_value_text(k, modules, depth + 1)}: {_value_text(v, modules, depth + 1)}"
                       for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
        return _name(value)
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, type):
        return f"class {_name(value)}"
    if callable(value):
        return _callable_text(value, modules, depth + 1)
    return f"{_name(type(value))} {stable_repr(value)}"


@functools.cache
def module_source_digest(module: str) -> str:
    """sha256 of the source file of ``module`` ("" when it has none): a helper a converter calls is part of it,
    and a vendor's code generator is part of its :attr:`~dicp.dynamo_bridge.vendor.Vendor.versions`."""
    path = getattr(sys.modules.get(module), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return ""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""
