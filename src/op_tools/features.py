"""``apply_feature``: apply a tool to functions outside torch (a third-party fused kernel, a custom op).

The named functions are replaced, where they are defined, by wrappers that hand each call to the tool
(when ``condition(*args, **kwargs)`` is true), exactly as the engine does for torch's own functions. The
returned handle's :meth:`~FeatureHandle.remove` puts the originals back and finishes the tool.

Upstream op_tools' form is accepted beside ours: ``apply_feature(ops=[...], feature=..., condition_func=...)``
with its feature names (``cast_dtype``, ``dump_op_args``, ``measure_op_time``, ``fallback``, ``autocompare``,
``op_capture``); callables given in ``ops=`` or in a list (``torch.add``) are patched in place, where their
module holds them.
"""

from __future__ import annotations

import atexit
import difflib
import functools
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diopi.env import ConfigError
from op_tools.autocompare import OpAutoCompare
from op_tools.capture import OpCapture
from op_tools.dtype_cast import OpDtypeCast
from op_tools.engine import run_call
from op_tools.fallback import OpFallback
from op_tools.naming import api_names, info_for_name, locate
from op_tools.observe import OpObserve
from op_tools.overflow import OpOverflowCheck
from op_tools.protocol import report_failure
from op_tools.time_measure import OpTimeMeasure
from op_tools.tool import OpTool

__all__ = ["FEATURES", "UPSTREAM_FEATURES", "FeatureHandle", "UnknownFeatureError", "apply_feature",
           "register_feature"]

#: Feature names accepted by :func:`apply_feature` (the seeds' names and short ones).
FEATURES: dict[str, Callable[..., OpTool]] = {
    "op_capture": OpCapture, "capture": OpCapture,
    "op_autocompare": OpAutoCompare, "autocompare": OpAutoCompare,
    "op_observe": OpObserve, "observe": OpObserve,
    "op_fallback": OpFallback, "fallback": OpFallback,
    "op_dtype_cast": OpDtypeCast, "dtype_cast": OpDtypeCast,
    "op_overflow_check": OpOverflowCheck, "overflow_check": OpOverflowCheck,
    "op_time_measure": OpTimeMeasure, "time_measure": OpTimeMeasure,
    # upstream op_tools' names (its apply_feature): dump_op_args printed each call's arguments
    "cast_dtype": OpDtypeCast, "dump_op_args": OpObserve, "measure_op_time": OpTimeMeasure,
}

#: The feature names upstream op_tools' ``apply_feature`` accepts, and the tool each maps to here.
UPSTREAM_FEATURES: dict[str, str] = {
    "fallback": "OpFallback", "autocompare": "OpAutoCompare", "measure_op_time": "OpTimeMeasure",
    "dump_op_args": "OpObserve", "cast_dtype": "OpDtypeCast", "op_capture": "OpCapture",
}


class UnknownFeatureError(ConfigError, AssertionError):
    """:func:`apply_feature` was given a feature name it does not know. A :class:`~diopi.env.ConfigError` (so a
    ``ValueError``) and, for upstream op_tools' own tests, which expect its ``assert feature in ...``, an
    ``AssertionError``."""


def unknown_feature(feature: object) -> UnknownFeatureError:
    """The error for an unknown feature name: it names the feature, a close known name, and every known one."""
    close = difflib.get_close_matches(str(feature), FEATURES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = ", ".join(sorted(FEATURES))
    return UnknownFeatureError(f"apply_feature: unknown feature {feature!r}{hint}; known: {known}")


_MISSING = object()  # a class attribute that was inherited, not stored on the class: remove() deletes it
_live: list[FeatureHandle] = []
_live_lock = threading.Lock()


def register_feature(name: str, factory: Callable[..., OpTool]) -> None:
    """Make ``name`` usable with :func:`apply_feature` (tools of other modules register themselves)."""
    FEATURES[name] = factory


def _locate(name: str) -> tuple[Any, str]:
    try:
        return locate(name)
    except LookupError:
        from diopi.op_names import closest

        near = closest(name, api_names())
        hint = f"did you mean {' or '.join(near)}?" if near else "give its importable dotted name"
        raise ConfigError(f"apply_feature(ops=...): cannot find the function {name!r} ({hint})") from None


@dataclass(eq=False)
class FeatureHandle:
    """What :func:`apply_feature` changed; :meth:`remove` undoes it."""

    tool: OpTool
    patched: list[tuple[Any, str, Any]] = field(default_factory=list)
    wrapped: list[Callable[..., Any]] = field(default_factory=list)

    def remove(self) -> None:
        """Restore the original functions and finish the tool (flush its output)."""
        for owner, attr, original in reversed(self.patched):
            if original is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        self.patched.clear()
        with _live_lock:
            if self in _live:
                _live.remove(self)
        self.tool.close()


@atexit.register
def _remove_all() -> None:
    """Upstream scripts never undo apply_feature: finish their tools' output at exit."""
    with _live_lock:
        handles = list(_live)
    for handle in reversed(handles):
        try:
            handle.remove()
        except Exception as exc:  # noqa: BLE001 - exit must go on
            print(f"apply_feature: finishing {handle.tool.name} at exit failed: {exc}", file=sys.stderr)


def _wrap(original: Callable[..., Any], name: str, tool: OpTool,
          condition: Callable[..., bool] | None) -> Callable[..., Any]:
    info = info_for_name(name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if condition is not None:
            try:
                wanted = bool(condition(*args, **kwargs))
            except Exception as exc:
                report_failure(tool, name, "its condition", exc)
                wanted = False
            if not wanted:
                return original(*args, **kwargs)
        return run_call([tool], info, original, args, kwargs, sys._getframe(1))

    wrapper.__op_tools_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _home(item: Callable[..., Any]) -> str | None:
    """The dotted name under which ``item``'s module (or class) holds it, for patching it in place."""
    candidates = []
    # a function another feature already patched is our wrapper: its original names the home too (torch's
    # name table, cached at its first use, may predate the patch and know the original only)
    for function in (item, getattr(item, "__wrapped__", None)):
        try:
            from torch.overrides import resolve_name
            candidates.append(resolve_name(function))
        except Exception:  # noqa: BLE001 - not a torch function
            pass
    module, qualname = getattr(item, "__module__", None), getattr(item, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        candidates.append(f"{module}.{qualname}")
    for name in candidates:
        if not name:
            continue
        try:
            owner, attr = locate(name)
        except LookupError:
            continue
        stored = owner.__dict__.get(attr, _MISSING) if isinstance(owner, type) else _MISSING
        if getattr(owner, attr, None) is item or getattr(stored, "__func__", None) is item:
            return name
    return None


def _conditions(condition: Any, count: int, keyword: str) -> list[Callable[..., bool] | None]:
    """One condition per function: a callable (or None) for all, or upstream's list, one per function in
    order (functions past its end have none)."""
    if isinstance(condition, (list, tuple)):
        for c in condition:
            if c is not None and not callable(c):
                raise TypeError(f"apply_feature: {keyword} entry {c!r} is not callable")
        return [condition[i] if i < len(condition) else None for i in range(count)]
    if condition is not None and not callable(condition):
        raise TypeError(f"apply_feature: {keyword} {condition!r} is not callable (a predicate on the call's "
                        f"arguments, or a list of them)")
    return [condition] * count


def apply_feature(funcs: str | Callable[..., Any] | list[str | Callable[..., Any]] | None = None,
                  feature: str | OpTool | None = None, condition: Callable[..., bool] | None = None, *,
                  condition_func: Callable[..., bool] | list[Callable[..., bool]] | None = None,
                  **tool_options: Any) -> FeatureHandle:
    """Apply ``feature`` (a name from :data:`FEATURES` or a tool instance) to ``funcs``.

    ``funcs`` are dotted names (``"my_kernels.fused_rms_norm"``, ``"my_pkg.Module.method"``), patched in
    place, or callables, whose wrappers are returned in :attr:`FeatureHandle.wrapped` (use those). Calls for
    which ``condition(*args, **kwargs)`` is false go straight to the original function.

    Upstream op_tools' form works too: ``apply_feature(ops=[...], feature="cast_dtype",
    condition_func=pred)``. When the functions come as ``ops=`` (instead of ``funcs``) or in a list,
    callables such as ``torch.add`` are also patched in place, where their module holds them; a bare
    callable given as ``funcs`` is only wrapped. ``condition_func`` is upstream's name for ``condition``
    and may be a list, one predicate per function in order. Other keywords go to the tool (``ops=`` is
    the tool's op list only when ``funcs`` is given).
    """
    in_place = isinstance(funcs, (list, tuple))
    if funcs is None:
        if "ops" not in tool_options:
            raise TypeError("apply_feature: give the functions, as funcs (first argument) or ops=")
        funcs = tool_options.pop("ops")
        in_place = True
    if feature is None:
        raise TypeError(f"apply_feature: give feature=, one of {', '.join(sorted(FEATURES))}")
    if condition is not None and condition_func is not None:
        raise TypeError("apply_feature: give condition or condition_func (upstream's name), not both")
    items = list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
    conditions = _conditions(condition_func if condition_func is not None else condition, len(items),
                             "condition_func" if condition_func is not None else "condition")
    if isinstance(feature, OpTool):
        tool = feature
    else:
        factory = FEATURES.get(str(feature))
        if factory is None:
            raise unknown_feature(feature)
        tool = None
    targets = []
    for item in items:
        if isinstance(item, str):
            owner, attr = _locate(item)
            if not callable(getattr(owner, attr)):
                raise TypeError(f"apply_feature: {item!r} is a {type(getattr(owner, attr)).__name__}, not a "
                                f"function (expected a dotted name or a callable)")
            targets.append((owner, attr, item))
        elif callable(item) and not (in_place and isinstance(item, type)):
            home = _home(item) if in_place else None
            if in_place and home is None:
                raise ValueError(f"apply_feature: cannot patch {item!r} in place: no module holds it under its "
                                 f"name (give its dotted name, or pass it alone as funcs to get a wrapper)")
            if home is not None:
                targets.append((*locate(home), home))
            else:
                targets.append((None, None, item))
        else:
            raise TypeError(f"apply_feature: expected a dotted name or a callable (a function), got {item!r}")
    if tool is None:
        tool = factory(**tool_options)
    handle = FeatureHandle(tool)
    tool.open()
    for (owner, attr, item), cond in zip(targets, conditions, strict=True):
        if owner is None:
            name = f"{getattr(item, '__module__', '') or ''}.{getattr(item, '__qualname__', repr(item))}".lstrip(".")
            handle.wrapped.append(_wrap(item, name, tool, cond))
        else:
            # On a class, take the attribute as stored (a staticmethod or classmethod object), wrap the
            # function inside and wrap it back the same way; remove() restores the stored object (or deletes
            # the attribute when the class inherited it, as torch.Tensor does its methods).
            if isinstance(owner, type):
                stored = owner.__dict__.get(attr, _MISSING)
                current = getattr(owner, attr) if stored is _MISSING else stored
            else:
                stored = current = getattr(owner, attr)
            if isinstance(current, (staticmethod, classmethod)):
                replacement: Any = type(current)(_wrap(current.__func__, item, tool, cond))
            else:
                replacement = _wrap(current, item, tool, cond)
            setattr(owner, attr, replacement)
            handle.patched.append((owner, attr, stored))
    with _live_lock:
        _live.append(handle)
    return handle
