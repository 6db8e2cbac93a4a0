"""The interception engine every op tool shares.

One ``TorchFunctionMode`` is installed while any tool is active. It sees every call of the PyTorch API
made by user code (``torch.*``, ``torch.Tensor`` methods, ``torch.nn.functional.*``; calls made inside
those functions are not seen again). For each operator call (see :mod:`op_tools.naming`) the engine asks
the active tools whether they act on it: by name (the tool's lists), by step, and by device (a tool acts
on calls with a tensor on its device). Acting tools get ``before`` and ``after`` callbacks, and, when they
want it, the call's backward: every autograd node the call created is hooked, and when the backward pass
ends the tools get the gradient of each output and of each input, as the call's own subgraph computed
them (see :mod:`op_tools.autograd_hooks`).

A tool that fails is reported once per op name and the user's result goes through unchanged. The
engine's own tensor work runs with torch functions modes disabled, so it is never intercepted.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode

from op_tools import autograd_hooks
from op_tools.callsite import call_site
from op_tools.naming import QUIET_WRITERS, FunctionInfo, function_info
from op_tools.steps import current_step

if TYPE_CHECKING:
    from op_tools.tool import OpTool

__all__ = ["OpCall", "collect_tensors", "engine", "internal", "map_tensors", "run_call"]


class internal:  # noqa: N801 (used like a function: ``with internal():``)
    """Context for the tools' own tensor work: nothing inside is intercepted, and no autograd graph is built."""

    __slots__ = ("_disable", "_grad")

    def __enter__(self) -> None:
        self._disable = torch._C.DisableTorchFunction()
        self._disable.__enter__()
        self._grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch._C._set_grad_enabled(self._grad)
        self._disable.__exit__(*exc)


_ids = itertools.count(1)
_sequence_nr = torch._C._autograd._get_sequence_nr


class OpCall:
    """One intercepted call. ``args``/``kwargs``/``inputs``/``outputs`` are dropped when the call returns,
    so a backward record never keeps tensors alive."""

    __slots__ = ("name", "info", "func", "args", "kwargs", "inputs", "outputs", "call_id", "step", "_site", "_frame",
                 "backward_hooked")

    def __init__(self, info: FunctionInfo, args: tuple, kwargs: dict, inputs: list[torch.Tensor],
                 frame: FrameType | None = None) -> None:
        self.name = info.name
        self.info = info
        self.func: Callable[..., Any] | None = None  # the function called (set by the engine)
        self.args = args
        self.kwargs = kwargs
        self.inputs = inputs
        self.outputs: list[torch.Tensor] = []
        self.call_id = next(_ids)
        self.step = current_step()
        self._site: str | None = None
        self._frame = frame
        self.backward_hooked = False  # set before ``after``: will the backward pass report to the tools?

    @property
    def call_site(self) -> str:
        """``file:line function: source`` of the user's line (valid while the call runs; then cached)."""
        if self._site is None:
            self._site = call_site(self._frame)
        return self._site

    @property
    def inplace(self) -> bool:
        """The call wrote into one of its inputs (by its name, an ``out=`` argument, or returning an input)."""
        if self.info.inplace or self.kwargs.get("out") is not None:
            return True
        ids = {id(t) for t in self.inputs}
        return any(id(t) in ids for t in self.outputs)

    def may_write_inputs(self, *, out: bool = True) -> bool:
        """Before the call: whether it may write into its inputs: an in-place name, normalization's running
        statistics (:data:`~op_tools.naming.QUIET_WRITERS`), ``inplace=True`` and, with ``out``, ``out=``."""
        kwargs = self.kwargs
        return (self.info.inplace or self.name in QUIET_WRITERS
                or (bool(kwargs) and (kwargs.get("inplace") is True or (out and kwargs.get("out") is not None))))

    def release(self) -> None:
        self.args, self.kwargs, self.inputs, self.outputs, self._frame = (), {}, [], [], None


def collect_tensors(value: Any, into: list[torch.Tensor], seen: set[int]) -> list[torch.Tensor]:
    """Tensors in ``value`` (nested tuples, lists, dicts, slices), each object once, in encoding order."""
    if isinstance(value, torch.Tensor):
        if id(value) not in seen:
            seen.add(id(value))
            into.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                if id(v) not in seen:
                    seen.add(id(v))
                    into.append(v)
            elif isinstance(v, (list, tuple, dict, slice)):
                collect_tensors(v, into, seen)
    elif isinstance(value, dict):
        for v in value.values():
            collect_tensors(v, into, seen)
    elif isinstance(value, slice):
        collect_tensors((value.start, value.stop, value.step), into, seen)
    return into


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to every leaf in nested tuples (named or not, ``torch.return_types``),
    lists, dicts and slices; containers are rebuilt only when a leaf changed."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = [map_tensors(v, fn) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, list):
            return items
        if hasattr(type(value), "n_fields"):  # torch.return_types structseq
            return type(value)(items)
        if hasattr(value, "_fields"):  # namedtuple
            return type(value)(*items)
        return tuple(items)
    if isinstance(value, dict):
        mapped = {k: map_tensors(v, fn) for k, v in value.items()}
        return value if all(mapped[k] is value[k] for k in value) else mapped
    if isinstance(value, slice):
        parts = [map_tensors(p, fn) for p in (value.start, value.stop, value.step)]
        return slice(*parts)
    return fn(value)


def _on_device(tensors: Iterable[torch.Tensor], device_type: str) -> bool:
    return any(t.device.type == device_type for t in tensors)


class _Engine:
    """The active tools and the mode that feeds them."""

    def __init__(self) -> None:
        self.tools: list[OpTool] = []
        self.mode: _InterceptMode | None = None
        self._lock = threading.Lock()
        self.reported: set[tuple[str, str]] = set()
        # Tools belong to the process that started them: a forked child (a DataLoader worker) has no writer
        # threads and must not print or capture on their behalf.
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget_tools)

    def _forget_tools(self) -> None:
        self.tools = []
        self._lock = threading.Lock()

    def activate(self, tool: OpTool) -> None:
        with self._lock:
            if tool in self.tools:
                return
            self.tools = [*self.tools, tool]
            if self.mode is None:
                self.mode = _InterceptMode()
                self.mode.__enter__()

    def deactivate(self, tool: OpTool) -> None:
        with self._lock:
            self.tools = [t for t in self.tools if t is not tool]
            if not self.tools and self.mode is not None:
                from torch.overrides import _get_current_function_mode_stack

                stack = _get_current_function_mode_stack()
                if stack and stack[-1] is self.mode:
                    self.mode.__exit__(None, None, None)
                    self.mode = None
                # else: a mode entered after ours is still on top; ours stays, passing calls through.

    def report(self, tool: OpTool, op: str, stage: str, exc: BaseException) -> None:
        """One warning per tool and op name for a tool's internal failure."""
        key = (type(tool).__name__, op)
        if key in self.reported:
            return
        self.reported.add(key)
        warnings.warn(f"{type(tool).__name__} failed in {stage} of {op} ({type(exc).__name__}: {exc}); "
                      f"the op's result is unchanged", RuntimeWarning, stacklevel=2)


engine = _Engine()


class _InterceptMode(TorchFunctionMode):
    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None):
        kwargs = kwargs or {}
        tools = engine.tools
        if not tools:
            return func(*args, **kwargs)
        info = function_info(func)
        if not info.is_op:
            return func(*args, **kwargs)
        return run_call(tools, info, func, args, kwargs, sys._getframe(1))


_profiling = torch._C._autograd._profiler_enabled  # a C flag read (~30 ns): the check on every op's path
_record_function = torch.profiler.record_function


def run_call(tools: list[OpTool], info: FunctionInfo, func: Callable[..., Any], args: tuple, kwargs: dict,
             frame: FrameType | None = None, *, ranged: bool = False) -> Any:
    """Run ``func`` with the tools in ``tools`` that act on it; ``frame`` is where it was called from.

    While ``torch.profiler`` records, the whole call (the op and the tools' work on it) is a range named
    after the op (``torch.nn.functional.linear``) in the trace, whichever tools act on it."""
    if not ranged and _profiling():
        with _record_function(info.name):
            return run_call(tools, info, func, args, kwargs, frame, ranged=True)
    acting = [t for t in tools if t.acts_on(info.name)]
    if not acting:
        return func(*args, **kwargs)
    inputs = collect_tensors((args, kwargs), [], set())
    present = [t for t in acting if _on_device(inputs, t.device_type)]
    if not present:
        if info.inplace:
            return func(*args, **kwargs)
        # A call without tensors on the device may still make one (factories, .to(device)).
        seq0 = _sequence_nr()
        out = func(*args, **kwargs)
        seq1 = _sequence_nr()
        outputs = collect_tensors(out, [], set())
        present = [t for t in acting if _on_device(outputs, t.device_type)]
        if not present:
            return out
        call = OpCall(info, args, kwargs, inputs, frame)
        call.func = func
        call.outputs = outputs
        _finish(_before(present, call), call, out, None, seq0, seq1)
        return out
    call = OpCall(info, args, kwargs, inputs, frame)
    call.func = func
    states = _before(present, call)
    edges = None
    if any(t.wants_backward for t, _ in states) and torch.is_grad_enabled():
        edges = autograd_hooks.input_edges(inputs)
    seq0 = _sequence_nr()
    out = _execute(states, call, func, args, kwargs)
    seq1 = _sequence_nr()
    call.outputs = collect_tensors(out, [], set())
    _finish(states, call, out, edges, seq0, seq1)
    return out


def _execute(states: list[tuple[OpTool, Any]], call: OpCall, func: Callable[..., Any], args: tuple,
             kwargs: dict) -> Any:
    """Run the call: the innermost acting tool that replaces execution (fallback, dtype cast) runs it, else
    ``func`` runs. A tool that fails before producing a result is reported and ``func`` runs as usual."""
    for tool, state in reversed(states):
        if tool.executes and state is not None:
            try:
                return tool.execute(call, state, func, args, kwargs)
            except Exception as exc:
                engine.report(tool, call.name, "running the call", exc)
            break
    return func(*args, **kwargs)


def _before(tools: list[OpTool], call: OpCall) -> list[tuple[OpTool, Any]]:
    states = []
    with internal():
        for tool in tools:
            try:
                states.append((tool, tool.before(call)))
            except Exception as exc:
                engine.report(tool, call.name, "before the call", exc)
    return states


def _finish(states: list[tuple[OpTool, Any]], call: OpCall, out: Any, edges: Any, seq0: int, seq1: int) -> None:
    """Hook the call's backward (if a tool wants it and the call built graph nodes), then ``after``."""
    with internal():
        if seq1 != seq0:
            wanting = [(t, s) for t, s in states if t.wants_backward and s is not None]
            if wanting:
                try:
                    if edges is None:
                        edges = autograd_hooks.input_edges(call.inputs)
                    call.backward_hooked = autograd_hooks.attach(call, wanting, edges, seq0, seq1) > 0
                except Exception as exc:
                    for tool, _ in wanting:
                        engine.report(tool, call.name, "hooking the backward", exc)
        for tool, state in reversed(states):
            try:
                tool.after(call, state, out)
            except Exception as exc:
                engine.report(tool, call.name, "after the call", exc)
    call.release()


def print_line(text: str) -> None:
    """Console output of the tools (stderr, so a program's own output stays clean)."""
    print(text, file=sys.stderr, flush=True)
