"""``apply_feature``: apply a tool to functions outside torch (a third-party fused kernel, a custom op).

The named functions are replaced, where they are defined, by wrappers that hand each call to the tool
(when ``condition(*args, **kwargs)`` is true), exactly as the engine does for torch's own functions. The
returned handle's :meth:`~FeatureHandle.remove` puts the originals back and finishes the tool.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from op_tools.autocompare import OpAutoCompare
from op_tools.capture import OpCapture
from op_tools.dtype_cast import OpDtypeCast
from op_tools.engine import engine, run_call
from op_tools.fallback import OpFallback
from op_tools.naming import FunctionInfo, is_inplace_name, is_random_name, is_uninitialized_name, locate
from op_tools.observe import OpObserve
from op_tools.overflow import OpOverflowCheck
from op_tools.time_measure import OpTimeMeasure
from op_tools.tool import OpTool

__all__ = ["FEATURES", "FeatureHandle", "apply_feature", "register_feature"]

#: Feature names accepted by :func:`apply_feature` (the seeds' names and short ones).
FEATURES: dict[str, Callable[..., OpTool]] = {
    "op_capture": OpCapture, "capture": OpCapture,
    "op_autocompare": OpAutoCompare, "autocompare": OpAutoCompare,
    "op_observe": OpObserve, "observe": OpObserve,
    "op_fallback": OpFallback, "fallback": OpFallback,
    "op_dtype_cast": OpDtypeCast, "dtype_cast": OpDtypeCast,
    "op_overflow_check": OpOverflowCheck, "overflow_check": OpOverflowCheck,
    "op_time_measure": OpTimeMeasure, "time_measure": OpTimeMeasure,
}


def register_feature(name: str, factory: Callable[..., OpTool]) -> None:
    """Make ``name`` usable with :func:`apply_feature` (tools of other modules register themselves)."""
    FEATURES[name] = factory


def _locate(name: str) -> tuple[Any, str]:
    try:
        return locate(name)
    except LookupError:
        raise ValueError(f"apply_feature: cannot find the function {name!r} (give its importable dotted name)") \
            from None


@dataclass
class FeatureHandle:
    """What :func:`apply_feature` changed; :meth:`remove` undoes it."""

    tool: OpTool
    patched: list[tuple[Any, str, Any]] = field(default_factory=list)
    wrapped: list[Callable[..., Any]] = field(default_factory=list)

    def remove(self) -> None:
        """Restore the original functions and finish the tool (flush its output)."""
        for owner, attr, original in reversed(self.patched):
            setattr(owner, attr, original)
        self.patched.clear()
        self.tool.close()


def _wrap(original: Callable[..., Any], name: str, tool: OpTool,
          condition: Callable[..., bool] | None) -> Callable[..., Any]:
    info = FunctionInfo(name, True, is_inplace_name(name), is_random_name(name), is_uninitialized_name(name))

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if condition is not None:
            try:
                wanted = bool(condition(*args, **kwargs))
            except Exception as exc:
                engine.report(tool, name, "its condition", exc)
                wanted = False
            if not wanted:
                return original(*args, **kwargs)
        return run_call([tool], info, original, args, kwargs, sys._getframe(1))

    wrapper.__op_tools_original__ = original  # type: ignore[attr-defined]
    return wrapper


def apply_feature(funcs: str | Callable[..., Any] | list[str | Callable[..., Any]], feature: str | OpTool,
                  condition: Callable[..., bool] | None = None, **tool_options: Any) -> FeatureHandle:
    """Apply ``feature`` (a name from :data:`FEATURES` or a tool instance) to ``funcs``.

    ``funcs`` are dotted names (``"my_kernels.fused_rms_norm"``, ``"my_pkg.Module.method"``), patched in
    place, or callables, whose wrappers are returned in :attr:`FeatureHandle.wrapped` (use those). Calls for
    which ``condition(*args, **kwargs)`` is false go straight to the original function.
    """
    if isinstance(feature, OpTool):
        tool = feature
    else:
        factory = FEATURES.get(str(feature))
        if factory is None:
            raise ValueError(f"apply_feature: unknown feature {feature!r}; known: {', '.join(sorted(FEATURES))}")
        tool = factory(**tool_options)
    handle = FeatureHandle(tool)
    items = funcs if isinstance(funcs, (list, tuple)) else [funcs]
    targets = []
    for item in items:
        if isinstance(item, str):
            owner, attr = _locate(item)
            targets.append((owner, attr, item))
        elif callable(item):
            targets.append((None, None, item))
        else:
            raise TypeError(f"apply_feature: expected a dotted name or a callable, got {item!r}")
    tool.open()
    for owner, attr, item in targets:
        if owner is None:
            name = f"{getattr(item, '__module__', '') or ''}.{getattr(item, '__qualname__', repr(item))}".lstrip(".")
            handle.wrapped.append(_wrap(item, name, tool, condition))
        else:
            # On a class, take the attribute as stored (a staticmethod or classmethod object), wrap the
            # function inside and wrap it back the same way; remove() restores the stored object.
            stored = owner.__dict__.get(attr, getattr(owner, attr)) if isinstance(owner, type) else \
                getattr(owner, attr)
            if isinstance(stored, (staticmethod, classmethod)):
                replacement: Any = type(stored)(_wrap(stored.__func__, item, tool, condition))
            else:
                replacement = _wrap(stored, item, tool, condition)
            setattr(owner, attr, replacement)
            handle.patched.append((owner, attr, stored))
    return handle
