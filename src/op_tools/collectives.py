"""``torch.distributed`` collectives, seen by every op tool while any tool is active.

c10d's tensor collectives (``all_reduce``, ``broadcast``, ``isend``, ...) dispatch to a torch function mode
themselves: the engine's mode sees them as ``torch.distributed.distributed_c10d.<function>``, which
:func:`~op_tools.naming.info_for_name` names ``torch.distributed.<function>``. ``barrier``, the object
collectives and the aliases (``all_gather_into_tensor``, ``reduce_scatter_tensor``) do not: while any tool is
active, the engine replaces each of those on the ``torch.distributed`` module with a wrapper (:func:`install`,
undone by :func:`remove` when the last tool stops) that hands the call to the engine under the same kind of
name; the original then runs with torch function dispatch off, so each tool sees the call once. The functions
that dispatch stay as they are (``P2POp(dist.isend, ...)`` checks that it got ``isend`` itself).

A collective runs exactly once, as the user called it: no tool runs it again or in its place (the engine
leaves out ``execute``), OpAutoCompare writes a SKIP row ("collective: not compared"), OpCapture saves its
inputs and outputs marked as not replayable alone (:func:`describe` gives the group), and
``ditorch replay`` skips such a case. Calls on distributed tensors (DTensor) count as collectives too
(:func:`needs_other_ranks`): running them again would redistribute.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from op_tools.naming import COLLECTIVES, FunctionInfo, info_for_name

__all__ = ["COLLECTIVES", "describe", "install", "needs_other_ranks", "remove"]

#: ``(module, attribute, original, wrapper)`` of every function replaced by :func:`install`.
_patched: list[tuple[Any, str, Any, Any]] = []
# True on a thread with a torch function mode on (the tools' thread), False inside a tool's own work, inside a
# call the engine is handling and on other threads: those calls are not the user's on the tools' thread.
_mode_enabled = torch._C._is_torch_function_mode_enabled


def install(runner: Callable[[FunctionInfo, Callable[..., Any], tuple, dict, Any], Any],
            active: Callable[[], bool]) -> None:
    """Wrap every collective on ``torch.distributed`` (idempotent). A wrapped call runs
    ``runner(info, inner, args, kwargs, frame)`` while ``active()`` on a thread with the torch function mode on
    (the tools see calls on the thread that started them; not inside a tool's own work, nor inside a call the
    engine is handling), else the original."""
    if _patched:
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    for attr in COLLECTIVES:
        original = getattr(dist, attr, None)
        if (original is None or not callable(original) or hasattr(original, "__op_tools_original__")
                or _dispatches(original)):
            continue
        wrapper = _wrap(original, info_for_name(f"torch.distributed.{attr}"), runner, active)
        setattr(dist, attr, wrapper)
        _patched.append((dist, attr, original, wrapper))


def _dispatches(function: Any) -> bool:
    """Whether ``function`` (under its decorators) hands itself to the torch function modes
    (``handle_torch_function``), as c10d's tensor collectives do."""
    for _ in range(8):
        code = getattr(function, "__code__", None)
        if code is not None and "handle_torch_function" in code.co_names:
            return True
        function = getattr(function, "__wrapped__", None)
        if function is None:
            return False
    return False


def remove() -> None:
    """Put the original functions back (a wrapper someone else replaced stays theirs; ours passes through)."""
    for owner, attr, original, wrapper in reversed(_patched):
        if getattr(owner, attr, None) is wrapper:
            setattr(owner, attr, original)
    _patched.clear()


def _wrap(original: Callable[..., Any], info: FunctionInfo, runner: Callable[..., Any],
          active: Callable[[], bool]) -> Callable[..., Any]:
    def inner(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():  # c10d's own dispatch to the mode: the engine has the call already
            return original(*args, **kwargs)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not active() or not _mode_enabled():
            return original(*args, **kwargs)
        return runner(info, inner, args, kwargs, sys._getframe(1))

    wrapper.__op_tools_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _group(args: tuple, kwargs: dict) -> Any:
    """The process group a call names (a ``group=`` keyword or a positional ``ProcessGroup``), else None."""
    import torch.distributed as dist

    group = kwargs.get("group")
    return group if group is not None else next((a for a in args if isinstance(a, dist.ProcessGroup)), None)


def describe(name: str, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The ``collective`` metadata of a captured call: ``op``, ``group_size``, ``group_rank``, ``backend``,
    ``global_rank``, ``world_size`` and ``async_op`` (None where unknown, e.g. before
    ``init_process_group``)."""
    meta: dict[str, Any] = {"op": name, "group_size": None, "group_rank": None, "backend": None, "global_rank": None,
                            "world_size": None, "async_op": bool(kwargs.get("async_op", False))}
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return meta
        group = _group(args, kwargs)
        meta.update(group_size=dist.get_world_size(group), group_rank=dist.get_rank(group),
                    backend=str(dist.get_backend(group)), global_rank=dist.get_rank(),
                    world_size=dist.get_world_size())
    except Exception:  # a group this rank is not in, a backend without a name: what is known is kept
        pass
    return meta


def needs_other_ranks(info: FunctionInfo, inputs: list[torch.Tensor]) -> str | None:
    """Why running this call again would need the other ranks (``"collective"``, ``"distributed tensor"``),
    or None."""
    if info.collective:
        return "collective"
    module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(module, "DTensor", None) if module is not None else None
    if dtensor is not None and any(isinstance(t, dtensor) for t in inputs):
        return "distributed tensor"
    return None
