"""The interception engine every op tool shares.

One ``TorchFunctionMode`` is installed while any tool is active. It sees every call of the PyTorch API
made by user code (``torch.*``, ``torch.Tensor`` methods, ``torch.nn.functional.*``; calls made inside
those functions are not seen again). For each operator call (see :mod:`op_tools.naming`) the engine finds
the tools acting on it: by name (the tools' lists) and step, resolved once per (op name, step) into a
:class:`Plan`, then by device (a tool acts on calls with a tensor on its device). The acting tools take
part in the phases they declare (:class:`~op_tools.protocol.Phase`): ``before``, ``execute``, ``after`` and
the backward (every autograd node the call created is hooked once, through :mod:`op_tools.autograd_hooks`).

Observation-only tools (no ``before``, no ``execute``) take a thin path: the call runs, its outputs are
collected, and the tools' ``after`` runs once, inside one internal context.

A tool that fails is reported once per op name and the user's result goes through unchanged. The
engine's own tensor work runs with torch functions modes disabled, so it is never intercepted.

Collectives of ``torch.distributed`` reach the engine as ``torch.distributed.all_reduce`` & co. while any
tool is active (:mod:`op_tools.collectives`). One without tensors (``barrier``, object collectives) is seen by
every tool acting on its name; one with tensors, by the tools of their device. A collective (or a call on
distributed tensors) always runs once, as called: no tool's ``execute`` runs it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from diopi import steps
from diopi.tensor_walk import call_tensors, tensors_in
from op_tools import autograd_hooks, collectives
from op_tools.naming import FunctionInfo, function_info
from op_tools.protocol import OpCall, Phase, Ran, internal, print_line, report_failure

__all__ = ["OpCall", "Phase", "Plan", "Ran", "engine", "internal", "print_line", "run_call"]

_sequence_nr = torch._C._autograd._get_sequence_nr
_Tensor = torch.Tensor
_BACKWARD = Phase.BACKWARD | Phase.BACKWARD_NODES


class Plan:
    """The tools acting on one op name in one step, split by the phases they take part in."""

    __slots__ = ("tools", "device_type", "before", "executors", "backward", "observe_only", "thin_states",
                 "after_tools", "backward_tools", "backward_plan")

    def __init__(self, tools: tuple[Any, ...]) -> None:
        self.tools = tools
        types = {t.device_type for t in tools}
        self.device_type: str | None = types.pop() if len(types) == 1 else None  # None: tools of several devices
        self.before = any(Phase.BEFORE in t.phases for t in tools)
        self.executors = tuple(t for t in tools if Phase.EXECUTE in t.phases)
        self.backward = any(t.phases & _BACKWARD for t in tools)
        self.observe_only = not self.before and not self.executors
        self.thin_states = [(t, None) for t in tools]  # every tool takes part, with no state
        self.after_tools = tuple(t for t in reversed(tools) if Phase.AFTER in t.phases)  # innermost first
        self.backward_tools = [(t, None) for t in tools if t.phases & _BACKWARD]
        self.backward_plan = autograd_hooks.BackwardPlan([t for t, _ in self.backward_tools])

    def present(self, tensors: list[torch.Tensor]) -> Plan | None:
        """This plan narrowed to the tools with a tensor in ``tensors`` on their device (None: no tool)."""
        if self.device_type is not None:
            device_type = self.device_type
            for t in tensors:
                if t.device.type == device_type:
                    return self
            return None
        types = {t.device.type for t in tensors}
        tools = tuple(tool for tool in self.tools if tool.device_type in types)
        return Plan(tools) if tools else None


def _plan_of(tools: Iterable[Any], name: str) -> Plan | None:
    acting = tuple(t for t in tools if t.acts_on(name))
    return Plan(acting) if acting else None


class _Engine:
    """The active tools, the mode that feeds them, and the plans resolved for the current step."""

    def __init__(self) -> None:
        self.tools: list[Any] = []
        self.mode: _InterceptMode | None = None
        self._lock = threading.Lock()
        self._plans: dict[str, Plan | None] = {}
        self._plans_step = 0
        # Tools belong to the process that started them: a forked child (a DataLoader worker) has no writer
        # threads and must not print or capture on their behalf.
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget_tools)

    def _has_tools(self) -> bool:
        return bool(self.tools)

    def _forget_tools(self) -> None:
        self.tools = []
        self._plans = {}
        self._lock = threading.Lock()

    def plan(self, name: str) -> Plan | None:
        """The tools acting on ``name`` in the current step (resolved once per name and step)."""
        step = steps.current_step()
        if step != self._plans_step:
            self._plans = {}
            self._plans_step = step
        try:
            return self._plans[name]
        except KeyError:
            plan = self._plans[name] = _plan_of(self.tools, name)
            return plan

    def invalidate(self) -> None:
        """Forget the resolved plans (a tool started, stopped or read its settings again)."""
        self._plans = {}

    def activate(self, tool: Any) -> None:
        with self._lock:
            if tool in self.tools:
                return
            self.tools = [*self.tools, tool]
            self._plans = {}
            if self.mode is None:
                self.mode = _InterceptMode()
                self.mode.__enter__()
            collectives.install(_collective_call, self._has_tools)

    def deactivate(self, tool: Any) -> None:
        with self._lock:
            self.tools = [t for t in self.tools if t is not tool]
            self._plans = {}
            if not self.tools:
                collectives.remove()
            if not self.tools and self.mode is not None:
                from torch.overrides import _get_current_function_mode_stack

                stack = _get_current_function_mode_stack()
                if stack and stack[-1] is self.mode:
                    self.mode.__exit__(None, None, None)
                    self.mode = None
                # else: a mode entered after ours is still on top; ours stays, passing calls through.


engine = _Engine()


class _InterceptMode(TorchFunctionMode):
    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None):
        kwargs = kwargs or {}
        if not engine.tools:
            return func(*args, **kwargs)
        info = function_info(func)
        if not info.is_op:
            return func(*args, **kwargs)
        plan = engine.plan(info.name)
        if plan is None:
            if _profiling():  # the range is there whichever tools act (OpProfilerRanges acts on none)
                with _record_function(info.name):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)
        return _run(plan, info, func, args, kwargs, sys._getframe(1))


_profiling = torch._C._autograd._profiler_enabled  # a C flag read (~30 ns): the check on every op's path
_record_function = torch.profiler.record_function


def run_call(tools: list[Any], info: FunctionInfo, func: Callable[..., Any], args: tuple, kwargs: dict,
             frame: FrameType | None = None) -> Any:
    """Run ``func`` with the tools in ``tools`` that act on it now; ``frame`` is where it was called from
    (for callers outside the mode: :func:`op_tools.apply_feature`'s patched functions, collectives)."""
    plan = _plan_of(tools, info.name)
    if plan is None:
        return func(*args, **kwargs)
    return _run(plan, info, func, args, kwargs, frame)


def _collective_call(info: FunctionInfo, func: Callable[..., Any], args: tuple, kwargs: dict,
                     frame: FrameType | None) -> Any:
    """A ``torch.distributed`` collective called while tools are active (:mod:`op_tools.collectives`)."""
    plan = engine.plan(info.name)
    if plan is None:
        if _profiling():
            with _record_function(info.name):
                return func(*args, **kwargs)
        return func(*args, **kwargs)
    return _run(plan, info, func, args, kwargs, frame)


def _run(plan: Plan, info: FunctionInfo, func: Callable[..., Any], args: tuple, kwargs: dict,
         frame: FrameType | None, ranged: bool = False) -> Any:
    """While ``torch.profiler`` records, the whole call (the op and the tools' work on it) is a range named
    after the op (``torch.nn.functional.linear``) in the trace, whichever tools act on it."""
    if not ranged and _profiling():
        with _record_function(info.name):
            return _run(plan, info, func, args, kwargs, frame, ranged=True)
    inputs = call_tensors(args, kwargs)
    present = plan.present(inputs)
    if present is None:
        if info.collective and not inputs:  # barrier, object collectives: every tool acting on the name sees it
            present = plan
        else:
            return _run_before_tools(plan, info, func, args, kwargs, inputs, frame)
    call = OpCall(info, args, kwargs, inputs, frame, func)
    if present.observe_only:
        return _observe(present, call, func, args, kwargs)
    states = _before(present, call)
    edges = None
    if present.backward and torch.is_grad_enabled():
        edges = autograd_hooks.input_edges(inputs)
    seq0 = _sequence_nr()
    out = _execute(states, call, func, args, kwargs)
    seq1 = _sequence_nr()
    call.outputs = _call_outputs(call, out)
    _finish(states, present, call, out, edges, seq0, seq1)
    return out


def _output_tensors(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, _Tensor) else tensors_in(out, unique=True)


def _call_outputs(call: OpCall, out: Any) -> list[torch.Tensor]:
    """The tensors a call produced: its result's, or for a collective the tensors it wrote (its results are
    ``None`` or a work handle)."""
    if call.info.collective:
        return list(call.inputs) if call.info.inplace else []
    return _output_tensors(out)


def _observe(plan: Plan, call: OpCall, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """The thin path of observation-only tools: run the call, then hook its backward and call ``after``."""
    if plan.backward:
        edges = autograd_hooks.input_edges(call.inputs) if torch.is_grad_enabled() else None
        seq0 = _sequence_nr()
        out = func(*args, **kwargs)
        seq1 = _sequence_nr()
        call.ran = Ran.NORMALLY
        call.outputs = _call_outputs(call, out)
        _finish(plan.thin_states, plan, call, out, edges, seq0, seq1)
        return out
    out = func(*args, **kwargs)
    call.ran = Ran.NORMALLY
    call.outputs = _call_outputs(call, out)
    with internal():
        for tool in plan.after_tools:
            try:
                tool.after(call, None, out)
            except Exception as exc:
                report_failure(tool, call.name, "after the call", exc)
    call.release()
    return out


def _run_before_tools(plan: Plan, info: FunctionInfo, func: Callable[..., Any], args: tuple, kwargs: dict,
                      inputs: list[torch.Tensor], frame: FrameType | None) -> Any:
    """A call without tensors on the tools' devices: it runs first, and the tools see it only if it made a
    device tensor (factories, ``x.to(device)``), with :attr:`OpCall.ran` saying so."""
    if info.inplace:
        return func(*args, **kwargs)
    seq0 = _sequence_nr()
    out = func(*args, **kwargs)
    seq1 = _sequence_nr()
    outputs = _output_tensors(out)
    present = plan.present(outputs)
    if present is None:
        return out
    call = OpCall(info, args, kwargs, inputs, frame, func)
    call.ran = Ran.BEFORE_TOOLS
    call.outputs = outputs
    states = _before(present, call) if not present.observe_only else present.thin_states
    _finish(states, present, call, out, None, seq0, seq1)
    return out


def _before(plan: Plan, call: OpCall) -> list[tuple[Any, Any]]:
    """The tools taking part in the call, each with its state: a tool with ``before`` that returns None sits
    the call out; a tool without ``before`` takes part with state None."""
    states = []
    with internal():
        for tool in plan.tools:
            if Phase.BEFORE not in tool.phases:
                states.append((tool, None))
                continue
            try:
                state = tool.before(call)
            except Exception as exc:
                report_failure(tool, call.name, "before the call", exc)
                continue
            if state is not None:
                states.append((tool, state))
    return states


def _execute(states: list[tuple[Any, Any]], call: OpCall, func: Callable[..., Any], args: tuple,
             kwargs: dict) -> Any:
    """Run the call: the innermost taking part tool that runs calls itself (fallback, dtype cast) runs it, else
    ``func`` runs. A tool that fails before producing a result is reported and ``func`` runs as usual.
    A call that needs the other ranks (a collective, distributed tensors) is never run by a tool."""
    for tool, state in reversed(states):
        if Phase.EXECUTE in tool.phases:
            if collectives.needs_other_ranks(call.info, call.inputs):
                break
            try:
                out = tool.execute(call, state, func, args, kwargs)
            except Exception as exc:
                report_failure(tool, call.name, "running the call", exc)
                break
            call.ran = Ran.BY_TOOL
            return out
    call.ran = Ran.NORMALLY
    return func(*args, **kwargs)


def _finish(states: list[tuple[Any, Any]], plan: Plan, call: OpCall, out: Any, edges: Any, seq0: int,
            seq1: int) -> None:
    """Hook the call's backward (if a taking part tool wants it and the call built graph nodes), then ``after``."""
    with internal():
        if seq1 != seq0 and plan.backward:
            if states is plan.thin_states:  # every tool takes part, with no state: the plan's own lists
                wanting, backward_plan = plan.backward_tools, plan.backward_plan
            else:
                wanting = [(t, s) for t, s in states if t.phases & _BACKWARD]
                backward_plan = None
            if wanting:
                try:
                    if edges is None:
                        edges = autograd_hooks.input_edges(call.inputs)
                    call.backward_hooked = autograd_hooks.attach(call, wanting, edges, seq0, seq1,
                                                                 backward_plan) > 0
                except Exception as exc:
                    for tool, _ in wanting:
                        report_failure(tool, call.name, "hooking the backward", exc)
        for tool, state in reversed(states):
            if Phase.AFTER in tool.phases:
                try:
                    tool.after(call, state, out)
                except Exception as exc:
                    report_failure(tool, call.name, "after the call", exc)
    call.release()
