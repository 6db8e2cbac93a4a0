"""Backward coverage: the gradients of one intercepted call, from every autograd node it created.

A call may create several nodes (``F.linear`` on 3-D input makes a view, a matmul and a transpose; an
in-place op on a view rewrites its base). Nodes are numbered per thread in creation order, so the nodes
a call created are exactly those reachable from its outputs whose sequence number lies in the range
seen during the call. Each gets a post-hook: the hook on an output's node records the gradient of that
output, and each edge leaving the call's subgraph towards one of the call's inputs (its ``grad_fn`` edge,
or the ``AccumulateGrad`` of a leaf) records that input's gradient. When the backward pass ends, the
tools get the call's gradients in one piece.

An input may be reached by several edges of the call (``addmm(x, x, x)``; ``F.linear(a, x, x)`` reaches ``x``
through ``AddmmBackward0`` and through the ``TBackward0`` of the weight). Its gradient is the sum of those
contributions, and that sum is what every tool gets, whatever it asked for: :func:`attach` counts the
contributions each input expects, a hook adds each one to a copy on the gradient's device, and the sum is
reduced to what the tools need (host copy, statistics, metadata) when the last contribution has arrived (or
when the backward pass ends, for contributions whose node did not run). Statistics are never combined from
per-contribution statistics: NaN counts, extremes and norms of a sum do not follow from those of its terms.
An input reached by one edge is reduced at once, without a copy.

Tools taking part in ``Phase.BACKWARD_NODES`` (OpTimeMeasure) also get a pre-hook and a post-hook around
each node's own work (``node_started`` / ``node_finished`` with the node's index); their post-hook is
registered before the recording hook, so the recording is not inside the bracket. Each call reports to the
tools once, for the first backward pass that reaches it.

Hooks keep no reference to the nodes or tensors of the forward pass (only indices), so the graph is
freed as usual. This module builds on :mod:`op_tools.protocol` only (not on the engine).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from op_tools.protocol import Phase, internal, report_failure

if TYPE_CHECKING:
    from op_tools.protocol import OpCall

__all__ = ["BackwardPlan", "GradMeta", "attach", "backward_pass", "created_nodes", "input_edges"]


class GradMeta(NamedTuple):
    """What a tool that needs no data learns about a gradient."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


def input_edges(inputs: list[torch.Tensor]) -> list[tuple[Any, int] | None]:
    """For each input: ``(grad_fn, output_nr)``, ``(leaf tensor, -1)`` or None (no gradient)."""
    edges: list[tuple[Any, int] | None] = []
    for t in inputs:
        if not t.requires_grad:
            edges.append(None)
        elif t.grad_fn is not None:
            edges.append((t.grad_fn, t.output_nr))
        else:
            edges.append((t, -1))
    return edges


class BackwardPlan:
    """What a set of tools wants from the backward of a call (worked out once per engine plan): whether
    gradients are recorded and in which form (the richest any tool needs), and which tools time nodes."""

    __slots__ = ("records", "keep", "timing")

    def __init__(self, tools: list[Any]) -> None:
        recording = [t for t in tools if Phase.BACKWARD in t.phases]
        needs = {t.backward_needs for t in recording}
        self.records = bool(recording)
        # Statistics are read later (no synchronisation per call) unless a tool also needs them per call.
        self.keep = (_keep_data if "data" in needs else
                     (_keep_stats_now if "finite" in needs else _keep_stats) if "stats" in needs
                     else _keep_finite if "finite" in needs else _keep_meta)
        self.timing = frozenset(id(t) for t in tools if Phase.BACKWARD_NODES in t.phases)


class _Record:
    __slots__ = ("call", "states", "timers", "grad_in", "grad_out", "finished", "keep", "pending", "expected",
                 "partial")

    def __init__(self, call: OpCall, states: list[tuple[Any, Any]], expected: dict[int, int],
                 plan: BackwardPlan) -> None:
        self.call = call
        self.states = states  # every tool told when the pass ends
        self.timers = [(t, s) for t, s in states if id(t) in plan.timing] if plan.timing else []
        self.grad_in: dict[int, Any] = {}
        self.grad_out: dict[int, Any] = {}
        self.finished = False
        self.pending = False
        # input index -> contributions it expects, for inputs reached by several edges of the call
        self.expected = {j: n for j, n in expected.items() if n > 1} if expected else expected
        # input index -> [sum so far on the gradient's device (or None), contributions still to come]
        self.partial: dict[int, list[Any]] = {}
        self.keep = plan.keep


def _keep_data(grads: list[torch.Tensor]) -> list[Any]:
    """Host copies (the engine may reuse a gradient's memory once the hook returns)."""
    return [g.detach().to("cpu", copy=True) for g in grads]


def _keep_stats(grads: list[torch.Tensor]) -> list[Any]:
    """Statistics of the gradients (:func:`op_tools.deferred_stats.statistics_later`: device tensors reduced where
    they are, host tensors on the background thread), filled in by the next
    :func:`op_tools.deferred_stats.resolve` (no host synchronisation per call)."""
    from op_tools.deferred_stats import statistics_later

    kept = statistics_later(dict(enumerate(grads)))
    return [kept[k] for k in range(len(grads))]


def _keep_stats_now(grads: list[torch.Tensor]) -> list[Any]:
    """Statistics of the gradients, read at once (for tools that decide per call)."""
    from op_tools.tensor_stats import device_stats

    return [{"shape": list(g.shape), "dtype": str(g.dtype).removeprefix("torch."), **stats}
            for g, stats in zip(grads, device_stats(grads), strict=True)]


def _keep_finite(grads: list[torch.Tensor]) -> list[Any]:
    """Statistics only where needed: a floating gradient whose sum is finite has no NaN or Inf (they survive
    addition), so it gets zero counts from one reduction; the others get full statistics."""
    kept: list[Any] = [None] * len(grads)
    rest = []
    for k, g in enumerate(grads):
        if g.is_floating_point() and math.isfinite(float(g.sum(dtype=torch.float64 if g.dtype == torch.float64
                                                                 else torch.float32))):
            kept[k] = {"shape": list(g.shape), "dtype": str(g.dtype).removeprefix("torch."), "numel": g.numel(),
                       "nan": 0, "inf": 0, "min": None, "max": None, "mean": None, "std": None, "norm": None}
        else:
            rest.append(k)
    if rest:
        for k, stats in zip(rest, _keep_stats_now([grads[k] for k in rest]), strict=True):
            kept[k] = stats
    return kept


def _keep_meta(grads: list[torch.Tensor]) -> list[Any]:
    return [GradMeta(g.shape, g.dtype, g.device) for g in grads]


_local = threading.local()
_NO_CONTEXT = contextlib.nullcontext()  # metadata of single contributions needs no tensor work: no internal context


def _pending() -> list[_Record]:
    pending = getattr(_local, "pending", None)
    if pending is None:
        pending = _local.pending = []
    return pending


def _accumulate(rec: _Record, j: int, g: torch.Tensor | None) -> torch.Tensor | None:
    """Add one contribution to input ``j``'s gradient; the sum once every expected contribution has come."""
    entry = rec.partial.get(j)
    if entry is None:
        entry = rec.partial[j] = [None, rec.expected[j]]
    if g is not None:
        # a copy: the engine may reuse a contribution's memory once the hook returns
        entry[0] = g.detach().clone() if entry[0] is None else entry[0] + g.detach()
    entry[1] -= 1
    if entry[1] > 0:
        return None
    del rec.partial[j]
    return entry[0]


def _flush_partial(rec: _Record) -> None:
    """Reduce the sums of inputs some of whose contributions never came (a node of the call did not run)."""
    slots = [(j, total) for j, (total, _) in rec.partial.items() if total is not None]
    rec.partial.clear()
    if slots:
        for (j, _), kept in zip(slots, rec.keep([total for _, total in slots]), strict=True):
            rec.grad_in[j] = kept


_passes = itertools.count(1)


def backward_pass() -> int:
    """The number of the backward pass whose gradients the tools are being given (from 1; ``on_backward`` of the
    calls of one pass sees one number)."""
    return getattr(_local, "pass_number", 0)


def _finish_backward() -> None:
    pending = _pending()
    _local.queued = False
    _local.pass_number = next(_passes)
    records, pending[:] = list(pending), []
    with internal():
        for rec in records:
            rec.finished = True
            if rec.partial:
                try:
                    _flush_partial(rec)
                except Exception as exc:
                    for tool, _ in rec.states:
                        report_failure(tool, rec.call.name, "recording gradients", exc)
            for tool, state in rec.states:
                try:
                    tool.on_backward(rec.call, state, rec.grad_in, rec.grad_out)
                except Exception as exc:
                    report_failure(tool, rec.call.name, "the backward", exc)


def _on_node(rec: _Record, out_slots: tuple[tuple[int, int], ...], edge_slots: tuple[tuple[int, int], ...],
             grad_inputs: tuple[torch.Tensor | None, ...], grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
    if rec.finished:
        return
    try:
        with internal() if rec.keep is not _keep_meta or rec.expected else _NO_CONTEXT:
            slots: list[tuple[bool, int]] = []
            grads: list[torch.Tensor] = []
            for k, nr in out_slots:
                g = grad_outputs[nr] if nr < len(grad_outputs) else None
                if g is not None and k not in rec.grad_out:
                    slots.append((True, k))
                    grads.append(g)
            for i, j in edge_slots:
                g = grad_inputs[i] if i < len(grad_inputs) else None
                if j in rec.expected:  # one of several contributions: kept as a sum until the last one
                    g = _accumulate(rec, j, g)
                if g is not None:
                    slots.append((False, j))
                    grads.append(g)
            for (is_output, index), kept in zip(slots, rec.keep(grads) if grads else [], strict=True):
                (rec.grad_out if is_output else rec.grad_in)[index] = kept
    except Exception as exc:
        for tool, _ in rec.states:
            report_failure(tool, rec.call.name, "recording gradients", exc)
        return
    _queue(rec)


def _queue(rec: _Record) -> None:
    """Report ``rec`` to its tools when the running backward pass ends."""
    if not rec.pending:
        rec.pending = True
        _pending().append(rec)
    if not getattr(_local, "queued", False):
        _local.queued = True
        torch.autograd.Variable._execution_engine.queue_callback(_finish_backward)


def _node_started(rec: _Record, k: int, grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
    if rec.finished:
        return
    for tool, state in rec.timers:
        try:
            tool.node_started(rec.call, state, k)
        except Exception as exc:
            report_failure(tool, rec.call.name, "the backward", exc)


def _node_finished(rec: _Record, k: int, grad_inputs: tuple[torch.Tensor | None, ...],
                   grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
    if rec.finished:
        return
    for tool, state in reversed(rec.timers):
        try:
            tool.node_finished(rec.call, state, k)
        except Exception as exc:
            report_failure(tool, rec.call.name, "the backward", exc)
    _queue(rec)


def created_nodes(outputs: list[torch.Tensor], seq0: int, seq1: int,
                  out_slots: dict[int, list[tuple[int, int]]] | None = None,
                  edges: dict[int, tuple] | None = None) -> tuple[list[Any], dict[int, int]]:
    """The autograd nodes made between sequence numbers ``seq0`` and ``seq1`` that are reachable from
    ``outputs``, and their index by ``id``. Fills ``out_slots`` (node id -> (output index, output_nr)) and
    ``edges`` (node id -> its ``next_functions``) when given."""
    index: dict[int, int] = {}
    created: list[Any] = []
    for k, out in enumerate(outputs):
        fn = out.grad_fn
        if fn is None:
            continue
        if id(fn) not in index:
            if not (seq0 <= fn._sequence_nr() < seq1):
                continue
            index[id(fn)] = len(created)
            created.append(fn)
        if out_slots is not None:
            out_slots.setdefault(id(fn), []).append((k, out.output_nr))
    stack = list(created)
    while stack:
        node = stack.pop()
        nexts = node.next_functions
        if edges is not None:
            edges[id(node)] = nexts
        for nf, _ in nexts:
            if nf is not None and id(nf) not in index and seq0 <= nf._sequence_nr() < seq1:
                index[id(nf)] = len(created)
                created.append(nf)
                stack.append(nf)
    return created, index


def attach(call: OpCall, states: list[tuple[Any, Any]], edges: list[tuple[Any, int] | None],
           seq0: int, seq1: int, plan: BackwardPlan | None = None) -> int:
    """Hook every node ``call`` created (sequence numbers in ``[seq0, seq1)``) for the tools in ``states``
    (those taking part in ``Phase.BACKWARD`` or ``Phase.BACKWARD_NODES``; ``plan``: their
    :class:`BackwardPlan`, worked out here when not given); returns how many nodes."""
    out_slots: dict[int, list[tuple[int, int]]] = {}
    nexts: dict[int, tuple] = {}
    created, index = created_nodes(call.outputs, seq0, seq1, out_slots, nexts)
    if not created:
        return 0
    if plan is None:
        plan = BackwardPlan([t for t, _ in states])
    records = plan.records
    by_fn: dict[tuple[int, int], int] = {}
    by_leaf: dict[int, int] = {}
    for j, edge in enumerate(edges if records else ()):
        if edge is None:
            continue
        obj, nr = edge
        if nr < 0:
            by_leaf.setdefault(id(obj), j)
        else:
            by_fn.setdefault((id(obj), nr), j)
    per_node: list[tuple[Any, list[tuple[int, int]]]] = []
    expected: dict[int, int] = {}
    for node in created:
        slots = []
        if records:
            for i, (nf, nr) in enumerate(nexts[id(node)]):
                if nf is None or id(nf) in index:
                    continue
                j = by_fn.get((id(nf), nr))
                if j is None and by_leaf:
                    variable = getattr(nf, "variable", None)
                    if variable is not None:
                        j = by_leaf.get(id(variable))
                if j is not None:
                    slots.append((i, j))
                    expected[j] = expected.get(j, 0) + 1
        per_node.append((node, slots))
    rec = _Record(call, states, expected, plan)
    for k, (node, slots) in enumerate(per_node):
        if rec.timers:
            node.register_prehook(functools.partial(_node_started, rec, k))
            node.register_hook(functools.partial(_node_finished, rec, k))
        outs = out_slots.get(id(node), ())
        if records and (outs or slots):  # a node that passes no gradient out of the call records nothing
            node.register_hook(functools.partial(_on_node, rec, tuple(outs), tuple(slots)))
    return len(created)
