"""``ModuleDump``: record every module call of a model, forward and backward, in the module dump format.

The format (``ditorch.module_dump/1``) is described in docs/module_tools.md ("Dump format"). Tensors are
detached host copies taken when the hook runs, so a later in-place change does not alter the dump (statistics
only: the tensors are reduced when the hook runs, by op_tools' statistics path, and read at the step's end); the
hooks never change a tensor the model sees, so training is bitwise the same with and without a dump.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import weakref
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.autograd.graph import get_gradient_edge
from torch.utils.hooks import RemovableHandle

from diopi.case_format import atomic_open, library_versions, write_tensors
from diopi.result_table import process_rank, process_world_size
from op_tools import deferred_stats, host_stats_worker

from .config import StepSet, parse_steps
from .dump_reader import FORMAT
from .walk import flatten_tensors, sequence_nr

__all__ = ["ModuleDump"]

#: Seconds between two rewrites of ``index.json`` at step ends (it is always written at ``stop()`` and after the
#: last step to record): rewriting it every step costs more than the statistics of a small model's step.
INDEX_INTERVAL_S = 2.0


_SUMS = ("mean", "std", "norm")  # min and max are over finite elements; these may overflow


def _finite(stats: dict[str, Any]) -> dict[str, Any]:
    """``stats`` with None for a non-finite number (a norm that overflowed float64, say): JSON has none."""
    if all(not isinstance(v, float) or math.isfinite(v) for v in (stats.get(k) for k in _SUMS)):
        return stats
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in stats.items()}


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _describe(t: torch.Tensor) -> dict[str, Any]:
    """dtype, shape and numel of ``t``: the statistics of a non-floating tensor, the start of the others'."""
    name = _DTYPE_NAMES.get(t.dtype)
    if name is None:
        name = _DTYPE_NAMES[t.dtype] = str(t.dtype).removeprefix("torch.")
    return {"dtype": name, "shape": list(t.shape), "numel": t.numel()}


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _stats(tensors: dict[str, torch.Tensor], defer: bool) -> dict[str, dict[str, Any]]:
    """Statistics of ``tensors`` by op_tools' statistics path (:mod:`op_tools.deferred_stats`): min, max, mean,
    std and norm over the finite elements, NaN and Inf counts, of every floating tensor, all reduced by one call
    where they are, from their values now. With ``defer`` the numbers arrive at the next :func:`_resolve` (host
    tensors are copied and reduced on op_tools' background thread, device tensors on the device)."""
    stats = {name: _describe(t) for name, t in tensors.items()}
    names = []
    for name, t in tensors.items():
        if not _floating(t):
            continue
        if t.device.type == "cpu":  # the CPU kernel of op_tools::tensor_stats, without the dispatch
            host_stats_worker.submit(t, stats[name])
        else:
            names.append(name)
    if names:
        deferred_stats.defer([tensors[name] for name in names], [stats[name] for name in names])
    if not defer:
        _resolve()
    return stats


def _resolve() -> None:
    """Fill every statistics dict :func:`_stats` left waiting."""
    deferred_stats.resolve()
    host_stats_worker.wait()


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    host = t.to("cpu", copy=True) if t.device.type != "cpu" else t.clone()
    return host.contiguous()


def _eager(hook: Any) -> Any:
    """``hook`` run eagerly when ``torch.compile`` traces a module call: the compiled graph breaks around it, so it
    sees real tensors (Dynamo would otherwise trace it with fake ones, and its host copies and statistics fail).
    Only where Dynamo is already imported (a model compiled before the dump starts, as ``ditorch dump-modules``
    and ``ditorch parity`` find it): importing it costs about a second, and without it nothing is compiled."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo.disable(hook, recursive=True) if dynamo is not None else hook


def _tensor_order(item: tuple[str, Any]) -> tuple[int, int]:
    kind, _, index = item[0].partition(".")
    rank = {"grad_input": 0, "grad_output": 1}.get(kind, 2)
    return (rank, int(index) if index.isdigit() else 0)


@dataclasses.dataclass
class _Entry:
    module: str
    cls: str
    step: int
    call: int
    direction: str
    tensors: dict[str, torch.Tensor | None] = dataclasses.field(default_factory=dict)
    stats: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    dir: str | None = None
    written: bool = False
    fixed: bool = False  # a fixed-input replay's results (module_tools.fixed_input)
    text: str | None = None  # record() as JSON, once the step is written (index.json is rewritten every step)

    def record(self) -> dict[str, Any]:
        tensors = {name: _finite(stats) for name, stats in self.stats.items()}
        return {"module": self.module, "class": self.cls, "step": self.step, "call": self.call,
                "direction": self.direction, "dir": self.dir, "tensors": tensors}

    def json_text(self) -> str:
        if self.text is None:
            self.text = json.dumps(self.record(), allow_nan=False)
        return self.text


class _Records(list):
    """Entries that :func:`_index_text` writes as a JSON list of their records, each encoded once."""


def _index_text(value: Any) -> str:
    """``value`` as compact JSON, as ``json.dumps(allow_nan=False)`` would write it with each
    :class:`_Records` list replaced by its entries' records."""
    if isinstance(value, _Records):
        return "[" + ", ".join(e.json_text() for e in value) + "]"
    if isinstance(value, dict) and any(isinstance(v, (_Records, dict)) for v in value.values()):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_index_text(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, allow_nan=False)


@dataclasses.dataclass
class _BackwardCall:
    """The backward of one module call while its gradients arrive."""

    entry: _Entry
    outputs: int = 0
    outputs_seen: int = 0
    expected: int = 0
    n_inputs: int = 0
    done: bool = False
    parts: dict[int, int] = dataclasses.field(default_factory=dict)  # input index -> gradient parts still to come
    sums: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # partial sums of those gradients


class ModuleDump:
    """Dump every call of every submodule of ``model`` into ``out_dir/rank<r>/``.

    Forward: the call's tensor inputs (positional then keyword), outputs and the module's own parameters.
    Backward: the gradients of its inputs (the part that flows through this call, as
    ``register_full_backward_hook`` gives it, up to summation order), of its outputs, and of its own
    parameters (the accumulated ``.grad``). The autograd graph is left as it is (hooks on tensors and nodes,
    no identity nodes), so gradients are bitwise the same as without a dump.

    ``stats_only=True`` keeps statistics only. ``steps`` (``"0-2"``, a ``range``, an iterable of step numbers;
    None = all) chooses the steps to record; a step ends at :meth:`step`, which a training loop calls after
    ``optimizer.step()`` (or pass ``step_on_optimizer=True`` to count every ``optimizer.step()`` as the end of
    a step).

    Use as a context manager, or with :meth:`start` / :meth:`stop`. ``index.json`` is rewritten at :meth:`stop`,
    after the last step to record, and at the end of a recorded step when :data:`INDEX_INTERVAL_S` seconds have
    passed since it was last written.
    """

    def __init__(self, model: torch.nn.Module, out_dir: str | Path, stats_only: bool = False,
                 steps: str | range | Iterable[int] | StepSet | None = None, step_on_optimizer: bool = False,
                 fixed_input: str | Path | Any | None = None) -> None:
        self.model = model
        self.out_dir = Path(out_dir)
        self.stats_only = bool(stats_only)
        self.steps = parse_steps(steps)  # type: ignore[arg-type]
        self.step_on_optimizer = step_on_optimizer
        self.current_step = 0
        self.rank_dir: Path | None = None
        self._handles: list[RemovableHandle] = []
        self._running = False
        self._active = False
        self._paths: dict[int, str] = {}
        self._owners: dict[int, list[tuple[str, str]]] = {}
        self._forward: list[_Entry] = []
        self._backward: list[_Entry] = []
        self._pending: list[_Entry] = []
        self._calls: dict[str, int] = {}
        self._open: dict[int, list[tuple[_Entry, int, dict[tuple[int, int], tuple[Any, list[int]]]]]] = {}
        self._param_grads: dict[int, torch.Tensor] = {}
        self._recorded_steps: list[int] = []
        self._modules: dict[str, str] = {}
        self._device = "cpu"
        self._watching: list[_BackwardCall] = []
        self._failed = False
        self._index_written = 0.0
        self._seen: dict[int, tuple[weakref.ref, int, dict[str, Any]]] = {}  # id -> statistics, this step
        self._fixed: list[_Entry] = []
        self._fixed_input = fixed_input
        self._replay: Any = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> ModuleDump:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ModuleDump:
        """Install the hooks (the step count starts at 0)."""
        if self._running:
            return self
        self.rank_dir = self.out_dir / f"rank{process_rank()}"
        self.rank_dir.mkdir(parents=True, exist_ok=True)
        self._modules = {}
        pre_hook, post_hook = _eager(self._pre_hook), _eager(self._post_hook)
        for path, module in self.model.named_modules():
            self._paths[id(module)] = path
            self._modules[path] = type(module).__name__
            self._handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
            self._handles.append(module.register_forward_hook(post_hook, with_kwargs=True))
            for name, param in module.named_parameters(recurse=False):
                owners = self._owners.setdefault(id(param), [])
                if not owners and param.requires_grad:
                    self._handles.append(param.register_post_accumulate_grad_hook(self._grad_hook))
                owners.append((path, name))
        param = next(self.model.parameters(), None)
        self._device = str(param.device) if param is not None else "cpu"
        if self._fixed_input is not None and self._replay is None:
            from .fixed_input import FixedInputReplay

            self._replay = FixedInputReplay(self._fixed_input, self.model, self._paths)
        if self.step_on_optimizer:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._handles.append(register_optimizer_step_post_hook(lambda *_: self.step()))
        self._running = True
        self._active = self.current_step in self.steps
        return self

    def stop(self) -> None:
        """Remove the hooks, write what the current step recorded and the index."""
        if not self._running:
            return
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._running = self._active = False
        self._finish_step()
        self._write_index()

    def step(self) -> int:
        """End the current step (call it after ``optimizer.step()``); returns the new step number."""
        if self._active:
            self._finish_step()
            if (self.steps.done_after(self.current_step)
                    or time.monotonic() - self._index_written >= INDEX_INTERVAL_S):
                self._write_index()
        self.current_step += 1
        self._active = self._running and self.current_step in self.steps
        return self.current_step

    # -- hooks -----------------------------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            print(f"module_tools: ModuleDump {what} failed ({type(exc).__name__}: {exc}); the run goes on",
                  file=sys.stderr)

    def _pre_hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._active or (self._replay is not None and self._replay.busy):
            return
        try:
            path = self._paths.get(id(module), "?")
            call = self._calls.get(path, 0)
            self._calls[path] = call + 1
            entry = _Entry(path, type(module).__name__, self.current_step, call, "forward")
            if self._replay is not None:
                self._replay.before(module, path, self.current_step, call, args, kwargs)
            inputs = flatten_tensors((args, kwargs))
            tensors = {f"input.{i}": t for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
            for name, param in module._parameters.items():  # named_parameters(recurse=False), cheaper
                if param is not None:
                    tensors[f"param.{name}"] = param
            self._keep(entry, tensors)
            self._forward.append(entry)
            edges: dict[tuple[int, int], tuple[Any, list[int]]] = {}
            if torch.is_grad_enabled():
                for i, t in enumerate(inputs):
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        edge = get_gradient_edge(t)
                        edges.setdefault((id(edge.node), edge.output_nr), (edge.node, []))[1].append(i)
            self._open.setdefault(id(module), []).append((entry, len(inputs), edges))
        except Exception as exc:  # noqa: BLE001 - a debugging tool lets the run through
            self._fail("forward pre-hook", exc)

    def _post_hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                   output: Any) -> None:
        if self._replay is not None and self._replay.busy:
            return
        stack = self._open.get(id(module))
        if not stack:
            return
        entry, n_inputs, edges = stack.pop()
        try:
            outputs = flatten_tensors(output)
            self._keep(entry, {f"output.{i}": t for i, t in enumerate(outputs) if isinstance(t, torch.Tensor)})
            self._write_entry(entry)
            if torch.is_grad_enabled():
                self._watch_backward(entry, n_inputs, edges, outputs)
        except Exception as exc:  # noqa: BLE001
            self._fail("forward hook", exc)
        if self._replay is not None:
            self._record_replay(module, entry, args, kwargs)

    def _record_replay(self, module: torch.nn.Module, entry: _Entry, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> None:
        """Fixed-input mode: run this call again on the reference run's inputs and parameters; its outputs
        (and gradients, from the reference's output gradients) become the call's ``fixed`` entries."""
        try:
            replayed = self._replay.after(module, entry.module, entry.step, entry.call, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - recorded in the index; the run goes on
            self._replay.record_failure(entry.module, entry.step, entry.call, exc)
            return
        for direction, tensors in replayed.items():
            if not tensors:
                continue
            fixed = _Entry(entry.module, entry.cls, entry.step, entry.call, direction, fixed=True)
            fixed.tensors = {k: _host_copy(v) for k, v in tensors.items()}
            self._write_entry(fixed)
            self._fixed.append(fixed)

    def _watch_backward(self, forward: _Entry, n_inputs: int, edges: dict[tuple[int, int], tuple[Any, list[int]]],
                        outputs: list[torch.Tensor | None]) -> None:
        """Hooks that see this call's gradients without changing the autograd graph: a hook on each output
        (its gradient) and on each node made by the call that passes a gradient to an input (the part of the
        input's gradient that flows through this call)."""
        state = _BackwardCall(_Entry(forward.module, forward.cls, forward.step, forward.call, "backward"))
        roots = []
        for i, t in enumerate(outputs):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(partial(self._output_grad_hook, state, i))
                state.outputs += 1
                if t.grad_fn is not None:
                    roots.append(t.grad_fn)
        if not state.outputs:
            return
        self._watching.append(state)
        if not edges:
            return
        bound = max((sequence_nr(node) for node, _ in edges.values() if type(node).__name__ != "AccumulateGrad"),
                    default=-1)
        seen: set[int] = set()
        while roots:
            node = roots.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for k, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                hit = edges.get((id(nxt), nr))
                if hit is not None:
                    node.register_hook(partial(self._input_grad_hook, state, k, hit[1]))
                    state.expected += 1
                    for i in hit[1]:
                        state.parts[i] = state.parts.get(i, 0) + 1
                elif id(nxt) not in seen and sequence_nr(nxt) > bound and nxt.next_functions:
                    roots.append(nxt)
        state.n_inputs = n_inputs

    def _output_grad_hook(self, state: _BackwardCall, index: int, grad: torch.Tensor) -> None:
        if not self._active or state.entry.step != self.current_step:
            return
        try:
            self._keep(state.entry, {f"grad_output.{index}": grad})
            state.outputs_seen += 1
            if not state.expected and state.outputs_seen >= state.outputs:
                self._finish_backward(state)
        except Exception as exc:  # noqa: BLE001
            self._fail("backward hook", exc)

    def _input_grad_hook(self, state: _BackwardCall, k: int, indices: list[int], grad_inputs: tuple[Any, ...],
                         grad_outputs: tuple[Any, ...]) -> None:
        if not self._active or state.entry.step != self.current_step:
            return
        try:
            grad = grad_inputs[k] if k < len(grad_inputs) else None
            if isinstance(grad, torch.Tensor):
                grad = grad.detach()
                for i in indices:  # one node's gradient may feed several inputs, and several nodes one input
                    name = f"grad_input.{i}"
                    left = state.parts.get(i, 1) - 1
                    state.parts[i] = left
                    old = state.sums.pop(name, None)
                    if left > 0:  # more parts to come: their sum, where the gradients are
                        state.sums[name] = grad.clone() if old is None else old + grad
                    else:
                        self._keep(state.entry, {name: grad if old is None else old + grad})
            state.expected -= 1
            if state.expected <= 0:
                self._finish_backward(state)
        except Exception as exc:  # noqa: BLE001
            self._fail("backward hook", exc)

    def _finish_backward(self, state: _BackwardCall) -> None:
        if state.done:
            return
        state.done = True
        entry = state.entry
        if state.sums:  # an input whose gradient did not arrive in full
            self._keep(entry, state.sums)
            state.sums = {}
        entry.tensors = dict(sorted(entry.tensors.items(), key=_tensor_order))
        entry.stats = dict(sorted(entry.stats.items(), key=_tensor_order))
        self._backward.append(entry)

    def _grad_hook(self, param: torch.Tensor) -> None:
        if not self._active or param.grad is None:
            return
        try:
            if self.stats_only:
                self._param_grads[id(param)] = _stats({"grad": param.grad}, defer=True)["grad"]
            else:
                self._param_grads[id(param)] = _host_copy(param.grad)
        except Exception as exc:  # noqa: BLE001
            self._fail("gradient hook", exc)

    # -- writing ---------------------------------------------------------------------------------------------
    def _attach_param_grads(self) -> None:
        last: dict[str, _Entry] = {}
        for entry in self._backward:
            last[entry.module] = entry
        for key, grad in self._param_grads.items():
            for path, name in self._owners.get(key, []):
                entry = last.get(path)
                if entry is None:  # no full backward hook fired (e.g. a dict output): an entry for the gradients
                    entry = _Entry(path, self._modules.get(path, "?"), self.current_step, 0, "backward")
                    self._backward.append(entry)
                    last[path] = entry
                if isinstance(grad, torch.Tensor):
                    entry.tensors[f"grad_param.{name}"] = grad
                else:
                    entry.stats[f"grad_param.{name}"] = grad
        self._param_grads.clear()

    def _write_entry(self, entry: _Entry) -> None:
        if entry.tensors:  # a statistics-only entry has its statistics already (taken by _keep)
            entry.stats.update(_stats({k: v for k, v in entry.tensors.items() if v is not None}, defer=True))
        if not self.stats_only and self.rank_dir is not None:
            folder = entry.module or "_root"
            kind = f"fixed_{entry.direction}" if entry.fixed else entry.direction
            entry.dir = f"{folder}/step{entry.step}-call{entry.call}/{kind}"
            target = self.rank_dir / entry.dir
            target.mkdir(parents=True, exist_ok=True)
            write_tensors(target / "tensors.safetensors",
                          {k: v for k, v in entry.tensors.items() if v is not None})
        entry.tensors = {}
        entry.written = True

    def _keep(self, entry: _Entry, tensors: dict[str, torch.Tensor]) -> None:
        """Record ``tensors`` of ``entry`` as they are now: host copies in a full dump; with ``stats_only``
        their statistics, reduced now where they are and read at the step's end (no copy)."""
        if self.stats_only:  # a tensor met again unchanged in this step (same object, same version) is reduced once
            fresh = {}
            for name, t in tensors.items():
                seen = self._seen.get(id(t))
                if seen is None or seen[0]() is not t or seen[1] != t._version:
                    fresh[name] = t
            stats = _stats(fresh, defer=True)
            for name, t in fresh.items():
                self._seen[id(t)] = (weakref.ref(t), t._version, stats[name])
            entry.stats.update({name: stats[name] if name in stats else self._seen[id(t)][2]
                                for name, t in tensors.items()})
        else:
            entry.tensors.update({k: _host_copy(t) for k, t in tensors.items()})

    def _finish_step(self) -> None:
        for state in self._watching:  # calls whose backward did not complete (an unused output, say)
            if not state.done and (state.entry.tensors or state.entry.stats or state.sums):
                self._finish_backward(state)
        self._watching = []
        try:
            self._attach_param_grads()
            for entry in self._forward:
                if not entry.written:
                    self._write_entry(entry)
            for entry in self._backward:
                if not entry.written:
                    self._write_entry(entry)
            _resolve()
        except Exception as exc:  # noqa: BLE001
            self._fail("writing", exc)
        if (self._forward or self._backward) and self.current_step not in self._recorded_steps:
            self._recorded_steps.append(self.current_step)
        self._pending.extend(self._forward)
        self._pending.extend(self._backward)
        self._pending.extend(self._fixed)
        self._forward, self._backward, self._fixed = [], [], []
        self._calls.clear()
        self._open.clear()
        self._seen.clear()

    def _write_index(self) -> None:
        if self.rank_dir is None:
            return
        self._index_written = time.monotonic()
        entries = self._pending
        index = {"format": FORMAT, "stats_only": self.stats_only, "rank": process_rank(),
                 "world_size": process_world_size(), "root": type(self.model).__name__, "device": self._device,
                 "steps": list(self._recorded_steps), "versions": library_versions(), "modules": self._modules,
                 "forward": _Records(e for e in entries if e.direction == "forward" and not e.fixed),
                 "backward": _Records(e for e in entries if e.direction == "backward" and not e.fixed)}
        if self._replay is not None:
            index["fixed_input"] = {"reference": str(self._replay.ref.path), "failed": self._replay.failures,
                                    "entries": _Records(e for e in entries if e.fixed)}
        try:
            with atomic_open(self.rank_dir / "index.json", "w", encoding="utf-8") as f:
                f.write(_index_text(index))
        except Exception as exc:  # noqa: BLE001
            self._fail("writing the index", exc)
