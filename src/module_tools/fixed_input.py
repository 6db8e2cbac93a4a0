"""Fixed-input mode: replay each module call of the test run on the reference run's inputs and parameters.

A layer of the test run that gets wrong inputs gives wrong outputs even when its own code is right. Replaying
every call on the *reference* run's inputs, parameters and output gradients (from a full reference dump) shows
each layer's own error, isolated from the error it inherited. :class:`ModuleDump` drives the replay
(``ModuleDump(model, out, fixed_input=REF_DUMP)``): right after each live call returns, the same module runs
again through :func:`torch.func.functional_call` with

- the reference call's inputs (cast to the live inputs' device and dtype) in the live call's argument
  structure (non-tensor arguments are the live ones),
- the reference run's parameters of the module and its submodules (from their first call of the step),
  buffers cloned from the live module (so the live running statistics are not touched),
- the random state the live call started with (so a dropout draws the same mask as the live call, which in a
  parity run is the reference's mask),

and, when the reference dump has the call's output gradients, a backward from those gradients gives the
replay's input and parameter gradients. The live run is not changed: the replay's tensors are fresh leaves, the
dump's hooks are off during the replay and the random state is put back afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from diopi.tensor_walk import MAX_DEPTH, leaves, map_leaves, tensors_in

from .dump_reader import Dump, DumpError, load_dump

__all__ = ["FixedInputReplay", "replace_tensors", "rng_state", "snapshot_opaque"]


def _sequence_nr(node: Any) -> int:
    """The sequence number of an autograd node (-1 for none): later nodes run first."""
    return node._sequence_nr() if node is not None else -1


_PLAIN = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.nn.Module, type)


def _is_opaque(value: Any) -> bool:
    """An argument object with state of its own (a KV cache, say), which a module call may change."""
    return (hasattr(value, "__dict__") and not isinstance(value, (*_PLAIN, torch.Tensor)) and not callable(value)
            and not (dataclasses.is_dataclass(value)))


def snapshot_opaque(value: Any, into: dict[int, Any]) -> None:
    """Deep copies of the stateful objects among the arguments ``value`` (id -> copy), taken before the call
    changes them, so that the replay sees them as the call did and cannot change the live ones."""
    for leaf in leaves(value):
        if _is_opaque(leaf) and id(leaf) not in into:
            memo: dict[int, Any] = {}
            _detached_copies(leaf, memo)
            with contextlib.suppress(Exception):  # not copyable: the replay gets the live object
                into[id(leaf)] = copy.deepcopy(leaf, memo)


def _detached_copies(value: Any, memo: dict[int, Any], depth: int = 0) -> None:
    """``memo`` for :func:`copy.deepcopy`: a detached copy of every tensor held by ``value`` (attributes,
    containers), so that tensors of the autograd graph (a cache's keys) copy too."""
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = value.detach().clone()
        return
    if depth >= MAX_DEPTH or isinstance(value, _PLAIN):
        return
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, (list, tuple, set)):
        items = value
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return
    for item in items:
        _detached_copies(item, memo, depth + 1)


def replace_tensors(value: Any, new: list[Any], objects: dict[int, Any] | None = None) -> Any:
    """``value`` with its tensors replaced, in :func:`~diopi.tensor_walk.tensors_in` order, by the items of
    ``new``, and the objects in ``objects`` (id -> replacement) replaced; containers keep their types."""
    fresh, objects = iter(new), objects or {}
    return map_leaves(value, lambda v: next(fresh) if isinstance(v, torch.Tensor) else objects.get(id(v), v))


def rng_state(device: torch.device) -> list[tuple[Any, torch.Tensor]]:
    """The CPU generator's state and, for an accelerator, its generator's state."""
    states: list[tuple[Any, torch.Tensor]] = [(None, torch.get_rng_state())]
    if device.type != "cpu":
        try:
            module = torch.get_device_module(device.type)
            index = device.index if device.index is not None else module.current_device()
            states.append(((module, index), module.get_rng_state(index)))
        except Exception:  # noqa: BLE001 - a device without a readable generator: the CPU's state only
            pass
    return states


def _set_rng_state(states: list[tuple[Any, torch.Tensor]]) -> None:
    for where, state in states:
        if where is None:
            torch.set_rng_state(state)
        else:
            module, index = where
            module.set_rng_state(state, index)


def _live_tree(model: torch.nn.Module) -> SimpleNamespace:
    """The live model in the shape :func:`module_tools.compare.align_modules` reads (paths, classes and
    parameter shapes)."""
    forward = [{"module": path, "tensors": {f"param.{n}": {"shape": list(p.shape)}
                                            for n, p in module.named_parameters(recurse=False)}}
               for path, module in model.named_modules()]
    return SimpleNamespace(modules={p: type(m).__name__ for p, m in model.named_modules()}, forward=forward,
                           path="<the live model>", root=type(model).__name__)


def _external_gradients(roots: list[torch.Tensor], grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients that reach each output from outside the call. A dump's ``grad_output.<i>`` is the output's
    whole gradient, which also holds what flows back from the call's own later use of it (an attention that
    returns its weights and multiplies them by the values); that part is taken off, from the latest output to
    the earliest (an output can only be used by outputs made after it)."""
    if len(roots) < 2:
        return grads
    order = sorted(range(len(roots)), key=lambda i: _sequence_nr(roots[i].grad_fn), reverse=True)
    external = list(grads)
    with torch.enable_grad():
        for pos, i in enumerate(order):
            later = order[:pos]
            if not later:
                continue
            inner = torch.autograd.grad([roots[j] for j in later], roots[i], [external[j] for j in later],
                                        retain_graph=True, allow_unused=True)[0]
            if inner is not None:
                external[i] = grads[i] - inner
    return external


class FixedInputReplay:
    """Replays the module calls of ``model`` on the inputs and parameters of the full reference dump ``ref``
    (a path or a :class:`~module_tools.dump_reader.Dump`). Modules pair with the reference's as
    :func:`~module_tools.compare.align_modules` pairs them; calls pair by step and call number."""

    def __init__(self, ref: str | Path | Dump, model: torch.nn.Module, paths: dict[int, str]) -> None:
        from .compare import align_modules

        self.ref = ref if isinstance(ref, Dump) else load_dump(ref)
        if self.ref.stats_only:
            raise DumpError(f"{self.ref.path / 'index.json'}: fixed-input mode replays the reference run's inputs "
                            "and needs a full dump; this one has statistics only")
        self.model = model
        self.paths = paths
        self.busy = False
        pairs = align_modules(self.ref, _live_tree(model)).pairs  # type: ignore[arg-type]
        self.to_ref = {test: ref_path for test, (ref_path, _) in pairs.items()}
        self._forward = {(e["module"], int(e["step"]), int(e["call"])): e for e in self.ref.forward}
        self._backward = {(e["module"], int(e["step"]), int(e["call"])): e for e in self.ref.backward}
        # each module's first call of each step (reversed: the first call is written last and stays)
        self._first_call = {(e["module"], int(e["step"])): e for e in reversed(self.ref.forward)}
        self._calls = Counter((e["module"], int(e["step"])) for e in self.ref.forward)
        owners = Counter(id(p) for m in model.modules() for p in m.parameters(recurse=False))
        self._shared = {key for key, count in owners.items() if count > 1}
        self._rng: dict[tuple[str, int, int], list[tuple[Any, torch.Tensor]]] = {}
        self._objects: dict[tuple[str, int, int], dict[int, Any]] = {}
        self.failures: list[dict[str, Any]] = []
        self._cache: dict[str, dict[str, torch.Tensor]] = {}
        self._cache_step = -1
        param = next(model.parameters(), None)
        self._device = param.device if param is not None else torch.device("cpu")

    # -- reference data --------------------------------------------------------------------------------------
    def _tensors(self, entry: dict[str, Any], step: int) -> dict[str, torch.Tensor]:
        if step != self._cache_step:
            self._cache, self._cache_step = {}, step
        key = str(entry.get("dir"))
        if key not in self._cache:
            self._cache[key] = self.ref.tensors(entry)
        return self._cache[key]

    def _ref_param(self, owner: str, name: str, step: int) -> torch.Tensor | None:
        ref_owner = self.to_ref.get(owner)
        entry = self._first_call.get((ref_owner, step)) if ref_owner is not None else None
        return self._tensors(entry, step).get(f"param.{name}") if entry is not None else None

    # -- replay ----------------------------------------------------------------------------------------------
    def before(self, module: torch.nn.Module, path: str, step: int, call: int, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> None:
        """A live call starts: keep the random state it starts from and copies of its stateful arguments."""
        ref_path = self.to_ref.get(path)
        if ref_path is not None and (ref_path, step, call) in self._forward:
            self._rng[(path, step, call)] = rng_state(self._device)
            objects: dict[int, Any] = {}
            snapshot_opaque((args, kwargs), objects)
            self._objects[(path, step, call)] = objects

    def record_failure(self, path: str, step: int, call: int, exc: BaseException) -> None:
        """A replay that raised: kept for the dump's index (the comparison reports it)."""
        self.busy = False
        self.failures.append({"module": path, "step": step, "call": call,
                              "error": f"{type(exc).__name__}: {exc}"[:500]})

    def after(self, module: torch.nn.Module, path: str, step: int, call: int, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
        """Replay the call that just returned; the replay's tensors by direction (``forward``: ``output.<i>``;
        ``backward``: ``grad_input.<i>`` and ``grad_param.<name>``). Nothing for a call the reference lacks."""
        rng = self._rng.pop((path, step, call), None)
        objects = self._objects.pop((path, step, call), None)
        ref_path = self.to_ref.get(path)
        ref_entry = self._forward.get((ref_path, step, call)) if ref_path is not None else None
        if ref_entry is None or rng is None:
            return {}
        ref_tensors = self._tensors(ref_entry, step)
        ref_grads_entry = self._backward.get((ref_path, step, call))
        ref_grads = self._tensors(ref_grads_entry, step) if ref_grads_entry is not None else {}
        want_grad = torch.is_grad_enabled() and any(k.startswith("grad_output.") for k in ref_grads)

        live_inputs = tensors_in((args, kwargs))
        leaves: dict[int, torch.Tensor] = {}  # input index -> the replay's leaf
        by_object: dict[int, torch.Tensor] = {}  # one live tensor given twice gets one leaf
        new_inputs: list[Any] = []
        for i, live in enumerate(live_inputs):
            ref = ref_tensors.get(f"input.{i}")
            if live is None or ref is None or tuple(ref.shape) != tuple(live.shape):
                new_inputs.append(live.detach() if isinstance(live, torch.Tensor) else live)
                continue
            leaf = by_object.get(id(live))
            if leaf is None:
                leaf = ref.to(device=live.device, dtype=live.dtype, copy=True)
                if want_grad and live.requires_grad and leaf.is_floating_point():
                    leaf.requires_grad_(True)
                by_object[id(live)] = leaf
            leaves[i] = leaf
            # a leaf that needs a gradient goes in as a copy, so that an in-place op in the module is allowed
            new_inputs.append(leaf.clone() if leaf.requires_grad else leaf)
        new_args, new_kwargs = replace_tensors((args, kwargs), new_inputs, objects=objects)

        values: dict[str, torch.Tensor] = {}
        by_param: dict[int, torch.Tensor] = {}
        for name, p in module.named_parameters(remove_duplicate=False):
            value = by_param.get(id(p))
            if value is None:
                owner, _, own_name = name.rpartition(".")
                ref = self._ref_param(f"{path}.{owner}" if path and owner else (owner or path), own_name, step)
                value = (ref.to(device=p.device, dtype=p.dtype, copy=True) if ref is not None and ref.shape == p.shape
                         else p.detach().clone())
                value.requires_grad_(want_grad and p.requires_grad and value.is_floating_point())
                by_param[id(p)] = value
            values[name] = value
        by_buffer: dict[int, torch.Tensor] = {}
        for name, b in module.named_buffers(remove_duplicate=False):
            values[name] = by_buffer.setdefault(id(b), b.detach().clone())

        after_live = rng_state(self._device)
        self.busy = True
        try:
            _set_rng_state(rng)
            with torch.set_grad_enabled(want_grad):
                output = torch.func.functional_call(module, values, tuple(new_args), new_kwargs)
            outputs = tensors_in(output)
            result = {"forward": {f"output.{i}": t.detach() for i, t in enumerate(outputs) if t is not None}}
            if want_grad:
                result["backward"] = self._backward_replay(module, path, ref_path, step, outputs, ref_grads, leaves,
                                                           values)
        finally:
            _set_rng_state(after_live)
            self.busy = False
        return result

    def _backward_replay(self, module: torch.nn.Module, path: str, ref_path: str, step: int,
                         outputs: list[torch.Tensor | None], ref_grads: dict[str, torch.Tensor],
                         leaves: dict[int, torch.Tensor], values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Gradients of the replay from the reference's output gradients: ``grad_input.<i>`` per input leaf and
        ``grad_param.<name>`` per own parameter, the latter only for a module called once in the step whose
        parameter is not shared (the reference's ``grad_param`` is the whole step's accumulated gradient)."""
        roots, grads = [], []
        for i, t in enumerate(outputs):
            g = ref_grads.get(f"grad_output.{i}")
            if isinstance(t, torch.Tensor) and t.requires_grad and g is not None and g.shape == t.shape:
                roots.append(t)
                grads.append(g.to(device=t.device, dtype=t.dtype))
        grads = _external_gradients(roots, grads)
        targets: dict[str, torch.Tensor] = {f"grad_input.{i}": leaf for i, leaf in leaves.items() if leaf.requires_grad}
        if self._calls[(ref_path, step)] == 1:
            for name, p in module.named_parameters(recurse=False):
                value = values.get(name)
                if value is not None and value.requires_grad and id(p) not in self._shared:
                    targets[f"grad_param.{name}"] = value
        if not roots or not targets:
            return {}
        with torch.enable_grad():
            got = torch.autograd.grad(roots, list(targets.values()), grads, allow_unused=True)
        return {name: g.detach() for name, g in zip(targets, got, strict=True) if g is not None}
