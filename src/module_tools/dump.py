"""``ModuleDump``: record every module call of a model, forward and backward, in the module dump format.

The format (``ditorch.module_dump/1``) is described in docs/module_tools.md ("Dump format"): an index, and in a
full dump one case per forward call (replayable with ``ditorch replay``) and a tensor file per backward. Tensors
are host copies taken when the hook runs, so a later in-place change does not alter the dump (statistics: the
tensors are reduced when the hook runs, by op_tools' statistics path, and read at the step's end); the hooks never
change a tensor the model sees, so training is bitwise the same with and without a dump.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from diopi import case_format as cf
from diopi.case_format import atomic_open, library_versions
from diopi.result_table import process_rank, process_world_size
from diopi.steps import StepRange, current_step, next_step, on_step_end
from diopi.tensor_walk import tensors_in
from op_tools import autograd_hooks
from op_tools.case_writer import CaseWriter
from op_tools.deferred_stats import resolve, statistics_later
from op_tools.module_case import encode_module
from op_tools.naming import FunctionInfo
from op_tools.protocol import OpCall, Phase
from op_tools.tool import OpTool

from .config import DUMP_STEPS_ENV
from .dump_reader import FORMAT
from .fixed_input import rng_state

_sequence_nr = torch._C._autograd._get_sequence_nr

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


def _backward_order(entry: _Entry) -> tuple[int, int, int]:
    """Where a call's backward ends: by backward pass, then in a pass a later call's first (the larger first
    sequence number), a call's before the calls that contain it (the smaller end)."""
    return (entry.backward_pass, -entry.span[0], entry.span[1])


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
    span: tuple[int, int] = (0, 0)  # the autograd sequence numbers the call's nodes got (backward order)
    backward_pass: int = 0  # op_tools' number of the backward pass that reported it
    case: _CaseDraft | None = None  # a forward call's case, in a full dump

    def record(self) -> dict[str, Any]:
        tensors = {name: _finite(stats) for name, stats in self.stats.items()}
        return {"module": self.module, "class": self.cls, "step": self.step, "call": self.call,
                "direction": self.direction, "dir": self.dir, "tensors": tensors}

    def json_text(self) -> str:
        if self.text is None:
            self.text = json.dumps(self.record(), allow_nan=False)
        return self.text


class _CaseDraft:
    """A forward call being recorded as a case: its inputs and the module's state are copied when the call
    starts (encoders ``i`` and ``p``), its outputs when it returns (``o``); ``names`` maps the dump's tensor names
    (``input.0``, ``param.weight``, ``output.0``) to the case's keys."""

    def __init__(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                 inputs: list[torch.Tensor], device: str) -> None:
        self.case = cf.CaseBuilder()
        self.case.encode_call(args, kwargs)
        given, state = self.case.encoder("i"), self.case.encoder("p")
        self.names = {f"input.{i}": given.key_of(t) or given.encode(t)["tensor"] for i, t in enumerate(inputs)}
        self.state = encode_module(module, state)
        self.names.update({f"param.{k}": state.key_of(p) for k, p in module._parameters.items() if p is not None})
        self.out: Any = None
        self.rng = rng_state(torch.device(device))
        self.random = False

    def finish(self, output: Any, outputs: list[torch.Tensor], device: str) -> None:
        enc = self.case.encoder("o")
        self.out = enc.encode(output)
        self.names.update({f"output.{i}": enc.key_of(t) or enc.encode(t)["tensor"] for i, t in enumerate(outputs)})
        after = rng_state(torch.device(device))  # a call that drew random numbers does not replay by value
        self.random = any(not torch.equal(a[1], b[1]) for a, b in zip(self.rng, after, strict=False))
        self.rng = []

    def data_size(self) -> int:
        """Bytes of tensor data the case holds."""
        return sum(t.nbytes for t in self.case.data.values())

    def write(self, folder: Path, entry: _Entry, device: str) -> None:
        record = self.case.record(
            tool="ModuleDump", op=self.state["class"], call_id=entry.call, step=entry.step, rank=process_rank(),
            call_site=None, device=device, inplace=False, random=self.random, mode="data", outputs=self.out)
        record["module"] = {"path": entry.module, "names": self.names, "state": self.state}
        cf.write_case(folder, record, self.case.data)


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


class ModuleDump(OpTool):
    """Dump every call of every submodule of ``model`` into ``out_dir/rank<r>/``: an op_tools tool whose calls are
    module calls (module hooks instead of the operator engine) and whose backward comes from the one backward
    mechanism of op_tools (:mod:`op_tools.autograd_hooks`: a module call is the span of autograd sequence
    numbers its forward made).

    Forward: the call's tensor inputs (positional then keyword), outputs and the module's own parameters; in a
    full dump each forward call is a case (:mod:`diopi.case_format`, the module's state included,
    :mod:`op_tools.module_case`) that ``ditorch replay`` replays. Backward: the gradients of its inputs (the part
    that flows through this call), of its outputs, and of its own parameters (the accumulated ``.grad``). The
    autograd graph is left as it is (hooks on nodes, no identity nodes), so gradients are bitwise the same as
    without a dump.

    ``stats_only=True`` keeps statistics only. ``steps`` (``"1-3"``, ``"1,4-5"``, a ``range``, step numbers;
    None = all, else ``MODULE_DUMP_STEPS``) chooses the steps to record, in op_tools' syntax and by op_tools' count
    (:mod:`diopi.steps`: each ``optimizer.step()`` ends a step), numbered from 1 at :meth:`start`; a loop without
    an optimizer calls :meth:`step` (or :func:`op_tools.next_step`).

    Use as a context manager, or with :meth:`start` / :meth:`stop`. ``index.json`` is rewritten at :meth:`stop`,
    after the last step to record, and at the end of a recorded step when :data:`INDEX_INTERVAL_S` seconds have
    passed since it was last written.
    """

    env_prefix = "MODULE_DUMP"
    steps_env = DUMP_STEPS_ENV
    phases = Phase.BACKWARD

    def __init__(self, model: torch.nn.Module, out_dir: str | Path, stats_only: bool = False,
                 steps: str | range | Iterable[int] | StepRange | None = None,
                 fixed_input: str | Path | Any | None = None) -> None:
        super().__init__(steps=steps)
        self.model = model
        self.out_dir = Path(out_dir)
        self.stats_only = bool(stats_only)
        self.backward_needs = "stats" if self.stats_only else "data"
        self.rank_dir: Path | None = None
        self._handles: list[Any] = []
        self._recording = False
        self._paths: dict[int, str] = {}
        self._owners: dict[int, list[tuple[str, str]]] = {}
        self._forward: list[_Entry] = []
        self._backward: list[_Entry] = []
        self._pending: list[_Entry] = []
        self._calls: dict[str, int] = {}
        self._open: dict[int, list[tuple[_Entry, list[torch.Tensor], list[Any], int]]] = {}
        self._infos: dict[str, FunctionInfo] = {}
        self._param_grads: dict[int, torch.Tensor] = {}
        self._recorded_steps: list[int] = []
        self._modules: dict[str, str] = {}
        self._device = "cpu"
        self._failed = False
        self._ended = False  # a step ended since the last step() call
        self._index_written = 0.0
        self._seen: dict[int, tuple[weakref.ref, int, dict[str, Any]]] = {}  # id -> statistics, this step
        self._fixed: list[_Entry] = []
        self._fixed_input = fixed_input
        self._replay: Any = None
        self._writer: CaseWriter | None = None
        self._origin = current_step()  # op_tools' step at start(): the dump's step 1

    @property
    def current_step(self) -> int:
        """The step now running, counted from 1 at :meth:`start` (op_tools' count, from the dump's start: two runs
        dumped one after the other in one process number their steps alike)."""
        return current_step() - self._origin + 1

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> ModuleDump:
        """Install the module hooks (no operator is intercepted)."""
        if self.active:
            return self
        self.reconfigure()
        self._origin = current_step()
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
        self._handles.append(SimpleNamespace(remove=on_step_end(self._step_ended)))  # a hook handle
        self.active = True
        self._recording = self.current_step in self.steps
        return self

    def stop(self) -> None:
        """Remove the hooks, write what the current step recorded and the index."""
        if not self.active:
            return
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.active = self._recording = False
        self._finish_step(self.current_step)
        self._write_index()

    def step(self) -> int:
        """End the current step in a loop without an optimizer; after ``optimizer.step()`` the step has ended
        already and this does nothing. Returns the step now running."""
        if not self._ended:
            next_step()
        self._ended = False
        return self.current_step

    def _step_ended(self, ended: int) -> None:
        self._ended = True
        ended = ended - self._origin + 1
        if self._recording:
            self._finish_step(ended)
            if self.steps.done_after(ended) or time.monotonic() - self._index_written >= INDEX_INTERVAL_S:
                self._write_index()
        self._recording = self.active and self.current_step in self.steps

    # -- hooks -----------------------------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            print(f"module_tools: ModuleDump {what} failed ({type(exc).__name__}: {exc}); the run goes on",
                  file=sys.stderr)

    def _pre_hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._recording or (self._replay is not None and self._replay.busy):
            return
        try:
            path = self._paths.get(id(module), "?")
            call = self._calls.get(path, 0)
            self._calls[path] = call + 1
            entry = _Entry(path, type(module).__name__, self.current_step, call, "forward")
            if self._replay is not None:
                self._replay.before(module, path, entry.step, call, args, kwargs)
            inputs = tensors_in((args, kwargs))
            tensors = {f"input.{i}": t for i, t in enumerate(inputs)}
            for name, param in module._parameters.items():  # named_parameters(recurse=False), cheaper
                if param is not None:
                    tensors[f"param.{name}"] = param
            self._keep_stats(entry, tensors)
            if not self.stats_only:
                entry.case = _CaseDraft(module, args, kwargs, inputs, self._device)
            self._forward.append(entry)
            edges = autograd_hooks.input_edges(inputs) if torch.is_grad_enabled() else []  # before in-place ops
            self._open.setdefault(id(module), []).append((entry, inputs, edges, _sequence_nr()))
        except Exception as exc:  # noqa: BLE001 - a debugging tool lets the run through
            self._fail("forward pre-hook", exc)

    def _post_hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                   output: Any) -> None:
        if self._replay is not None and self._replay.busy:
            return
        stack = self._open.get(id(module))
        if not stack:
            return
        entry, inputs, edges, seq0 = stack.pop()
        try:
            outputs = tensors_in(output)
            self._keep_stats(entry, {f"output.{i}": t for i, t in enumerate(outputs)})
            if entry.case is not None:
                entry.case.finish(output, outputs, self._device)
            self._write_entry(entry)
            if torch.is_grad_enabled():
                self._watch_backward(entry, inputs, edges, outputs, seq0, _sequence_nr())
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

    def _watch_backward(self, forward: _Entry, inputs: list[torch.Tensor], edges: list[Any],
                        outputs: list[torch.Tensor], seq0: int, seq1: int) -> None:
        """Hand the call to op_tools' backward mechanism: the nodes its forward made (sequence numbers
        ``[seq0, seq1)``) report the gradients of its outputs and of its inputs to :meth:`on_backward`."""
        if seq1 == seq0 or not any(t.requires_grad for t in outputs):
            return
        info = self._infos.get(forward.module)
        if info is None:
            info = self._infos[forward.module] = FunctionInfo(forward.module, False, False, False)
        call = OpCall(info, (), {}, inputs)
        call.outputs = outputs
        state = _Entry(forward.module, forward.cls, forward.step, forward.call, "backward", span=(seq0, seq1))
        autograd_hooks.attach(call, [(self, state)], edges or autograd_hooks.input_edges(inputs), seq0, seq1)
        call.release()

    def on_backward(self, call: OpCall, state: _Entry, grad_inputs: dict[int, Any],
                    grad_outputs: dict[int, Any]) -> None:
        """The gradients of one module call (host copies, or statistics in a statistics-only dump)."""
        if not self._recording or state.step != self.current_step:
            return
        grads = {**{f"grad_input.{i}": g for i, g in grad_inputs.items()},
                 **{f"grad_output.{i}": g for i, g in grad_outputs.items()}}
        for name, g in sorted(grads.items(), key=_tensor_order):
            if isinstance(g, torch.Tensor):
                state.tensors[name] = g
            else:  # the statistics op_tools reduced (filled at the step's end)
                g["numel"] = math.prod(g["shape"])
                state.stats[name] = g
        state.backward_pass = autograd_hooks.backward_pass()
        self._backward.append(state)

    def _grad_hook(self, param: torch.Tensor) -> None:
        if not self._recording or param.grad is None:
            return
        try:
            self._param_grads[id(param)] = (statistics_later({"grad": param.grad})["grad"] if self.stats_only
                                            else _host_copy(param.grad))
        except Exception as exc:  # noqa: BLE001
            self._fail("gradient hook", exc)

    # -- writing ---------------------------------------------------------------------------------------------
    def _attach_param_grads(self, step: int) -> None:
        last = {entry.module: entry for entry in self._backward}  # each module's last backward entry
        for key, grad in self._param_grads.items():
            for path, name in self._owners.get(key, []):
                entry = last.get(path)
                if entry is None:  # no node of the call reported (e.g. a dict output): an entry for the gradients
                    entry = _Entry(path, self._modules.get(path, "?"), step, 0, "backward")
                    self._backward.append(entry)
                    last[path] = entry
                (entry.tensors if isinstance(grad, torch.Tensor) else entry.stats)[f"grad_param.{name}"] = grad
        self._param_grads.clear()

    def _write_entry(self, entry: _Entry) -> None:
        if entry.tensors:  # host copies (backward, fixed input): their statistics
            entry.stats.update(statistics_later({k: v for k, v in entry.tensors.items() if v is not None}))
        if not self.stats_only and self.rank_dir is not None:
            folder = entry.module or "_root"
            kind = f"fixed_{entry.direction}" if entry.fixed else entry.direction
            entry.dir = f"{folder}/step{entry.step}-call{entry.call}/{kind}"
            target, case, device = self.rank_dir / entry.dir, entry.case, self._device
            tensors = {k: v for k, v in entry.tensors.items() if v is not None}

            def write() -> None:  # on op_tools' writer thread: the training thread only copies
                if case is not None:
                    case.write(target, entry, device)
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    cf.write_tensors(target / cf.TENSORS_FILE, tensors)

            data = case.data_size() if case is not None else sum(t.nbytes for t in tensors.values())
            if self._writer is None:
                self._writer = CaseWriter(name="module-dump-writer")
            self._writer.submit(write, data)
        entry.tensors, entry.case = {}, None
        entry.written = True

    def _keep_stats(self, entry: _Entry, tensors: dict[str, torch.Tensor]) -> None:
        """The statistics of ``tensors`` as they are now, reduced where they are and read at the step's end (no
        copy); a tensor met again unchanged in this step (same object, same version) is reduced once."""
        fresh = {}
        for name, t in tensors.items():
            seen = self._seen.get(id(t))
            if seen is None or seen[0]() is not t or seen[1] != t._version:
                fresh[name] = t
        stats = statistics_later(fresh)
        for name, t in fresh.items():
            self._seen[id(t)] = (weakref.ref(t), t._version, stats[name])
        entry.stats.update({name: stats[name] if name in stats else self._seen[id(t)][2]
                            for name, t in tensors.items()})

    def _finish_step(self, step: int) -> None:
        try:
            self._attach_param_grads(step)
            self._backward.sort(key=_backward_order)
            for entry in (*self._forward, *self._backward):
                if not entry.written:
                    self._write_entry(entry)
            resolve()
        except Exception as exc:  # noqa: BLE001
            self._fail("writing", exc)
        if (self._forward or self._backward) and step not in self._recorded_steps:
            self._recorded_steps.append(step)
        self._pending += [*self._forward, *self._backward, *self._fixed]
        self._forward, self._backward, self._fixed = [], [], []
        self._calls.clear()
        self._open.clear()
        self._seen.clear()

    def _write_index(self) -> None:
        if self.rank_dir is None:
            return
        self._index_written = time.monotonic()
        if self._writer is not None:
            self._writer.flush()  # the index names only folders that are written
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
