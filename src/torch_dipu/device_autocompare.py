"""``DIPU_AUTOCOMPARE_OPS_LIST``: compare chosen ATen ops that reach the device against the CPU as they run.

Each ATen overload the list names (same entry rules as ``DIPU_FORCE_FALLBACK_OPS_LIST``; entries of
``.specified_autocompare_op_list.config`` in the working directory are added) whose vendor kernel runs is
wrapped (:func:`torch_dipu.dispatch.set_handler_wrapper`, name ``autocompare``). Per call, forward or backward:

1. host copies of every tensor argument are taken (strides and storage offset kept);
2. the device kernel runs; its result is what the caller gets, unchanged;
3. arguments the schema does not write must be bitwise unchanged on the device (``input <name> modified``);
4. the same overload runs on the host copies on the CPU; every output, and every written argument the op does
   not return (``out=``, running statistics), is judged by :func:`diopi.reference.judge_outputs` (the
   tolerance, then the float64 noise floor).

One line per call goes to stdout (``autocompare:\\t<op> <phase>: allclose`` or ``... not_close ...``); after
:data:`ALLCLOSE_LINES` allclose lines of one (op, phase) further allclose calls are only counted. Every judged
tensor is a row of ``<OP_TOOLS_RESULTS_DIR>/dipu_autocompare/<run>/rank<r>/results.{jsonl,csv}``
(:mod:`diopi.result_table`). Random ops are SKIP rows. CPU fallbacks and torch_dipu's own views and
allocations are never compared. With an empty list no wrapper is installed: nothing is paid.
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from diopi import case_format as cf
from diopi.compare import TensorComparison, Verdict, compare_tensors
from diopi.env import split_list
from diopi.reference import judge_outputs, widen
from diopi.result_table import VERDICT_NAMES, ResultTable, default_run_id, free_run_dir, process_rank
from diopi.tensor_walk import leaves, map_leaves, tensors_in
from torch_dipu import dispatch, kernels
from torch_dipu.config import checked_op_list
from torch_dipu.state import DipuState, get_state
from torch_dipu.tensor import DipuTensor

__all__ = ["ALLCLOSE_LINES", "VARIABLE", "install", "results", "set_autocompare_ops", "summary"]

VARIABLE = "DIPU_AUTOCOMPARE_OPS_LIST"
#: allclose lines printed per (op, phase); later allclose calls of it are counted, not printed.
ALLCLOSE_LINES = 3
TOOL_FOLDER = "dipu_autocompare"
_CPU = torch.device("cpu")
#: ATen packets that write arguments their schema does not mark as written: batch norm in training mode
#: updates its running statistics. These are compared like outputs, not checked for unexpected writes.
_QUIET_WRITES = dict.fromkeys(("native_batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm", "miopen_batch_norm",
                               "batch_norm", "instance_norm"), ("running_mean", "running_var"))


class _Session:
    """The list in force, the results table and the counts of one process."""

    def __init__(self, patterns: list[Any], entries: list[str], results_dir: str | Path | None,
                 run_id: str | None) -> None:
        self.patterns = patterns
        self.entries = entries
        self.results_dir = Path(results_dir) if results_dir else Path("op_tools_results")
        self.run_id = run_id or ""
        self.table: ResultTable | None = None
        self.calls: Counter[str] = Counter()  # "allclose" / "not_close" / "skipped" -> calls
        self.lines: Counter[tuple[str, str]] = Counter()  # (op, phase) -> allclose lines printed
        self.reported: set[str] = set()  # ops whose internal failure was printed
        self.next_id = 0
        self.lock = threading.Lock()

    @property
    def run_dir(self) -> Path:
        if self.table is None:
            root = self.results_dir / TOOL_FOLDER
            self.table = ResultTable("dipu autocompare", free_run_dir(root, self.run_id or default_run_id(),
                                                                        process_rank()), print_line=_print)
        return self.table.run_dir

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        _ = self.run_dir
        for row in rows:
            self.table.add(row)
        self.table.flush()


_SESSION: _Session | None = None
_LOCAL = threading.local()  # .busy: inside a comparison (never compare re-entrantly)
_EXIT_HOOKED = False


def _print(text: str) -> None:
    print(text, flush=True)


def install(state: DipuState) -> None:
    """Start comparing the ops ``state.config.autocompare_ops`` names (nothing when the list is empty)."""
    if state.config.autocompare_ops:
        set_autocompare_ops(state.config.autocompare_ops)


def set_autocompare_ops(entries: list[str] | str, results_dir: str | Path | None = None,
                        run_id: str | None = None) -> None:
    """Replace the auto-compare list (same syntax as ``DIPU_AUTOCOMPARE_OPS_LIST``); empty switches it off.

    ``results_dir`` / ``run_id`` (default ``OP_TOOLS_RESULTS_DIR`` / ``OP_TOOLS_RUN_ID`` as read at import)
    choose the results folder; rows go to a new run folder from this call on. A malformed regular expression
    raises ``ValueError`` naming the entry and ``DIPU_AUTOCOMPARE_OPS_LIST``."""
    global _SESSION, _EXIT_HOOKED
    items = split_list(entries) if isinstance(entries, str) else [e.strip() for e in entries if e.strip()]
    patterns = checked_op_list(items, VARIABLE)
    config = get_state().config
    config.autocompare_ops = items
    if _SESSION is not None and _SESSION.table is not None:
        _SESSION.table.close()
    if not patterns:
        _SESSION = None
        dispatch.set_handler_wrapper("autocompare", None)
        return
    _SESSION = _Session(patterns, items, results_dir or config.results_dir or None, run_id or config.run_id)
    if not _EXIT_HOOKED:
        atexit.register(_at_exit)
        _EXIT_HOOKED = True
    dispatch.set_handler_wrapper("autocompare", _wrap)


def results() -> list[dict[str, Any]]:
    """The rows written since the list was last set (read back from ``results.jsonl``)."""
    session = _SESSION
    if session is None or session.table is None:
        return []
    return session.table.rows


def summary() -> str:
    """``dipu autocompare: N ops compared: X allclose, Y not_close; results in DIR`` (empty when nothing ran)."""
    session = _SESSION
    if session is None or not sum(session.calls.values()):
        return ""
    calls = session.calls
    skipped = f", {calls['skipped']} skipped" if calls["skipped"] else ""
    return (f"dipu autocompare: {calls['allclose'] + calls['not_close']} ops compared: {calls['allclose']} "
            f"allclose, {calls['not_close']} not_close{skipped}; results in {session.run_dir}")


def _at_exit() -> None:
    line = summary()
    if line:
        _print(line)
    if _SESSION is not None and _SESSION.table is not None:
        _SESSION.table.close()


# -- the wrapper ---------------------------------------------------------------------------------------------

def _wrap(handler: dispatch.Handler, func: torch._ops.OpOverload, plan: kernels.KernelPlan) -> dispatch.Handler:
    session = _SESSION
    if session is None or plan.kind != "vendor" or plan.function is None or not kernels.matches(session.patterns,
                                                                                                 func):
        return handler
    name = kernels.op_names(func)[0]
    arguments = func._schema.arguments
    positions = [a.name for a in arguments]
    seeded = torch.Tag.nondeterministic_seeded in func.tags
    if plan.function.is_random or (seeded and "dropout_p" not in positions):
        def skipped(args: tuple, kwargs: dict | None) -> Any:
            out = handler(args, kwargs)
            if not getattr(_LOCAL, "busy", False):
                _skip(session, name, plan.function.name, _phase(), "random op: not compared by value")
            return out

        return skipped
    # Attention kernels draw random numbers only for dropout: with dropout_p == 0 they are compared.
    dropout_at = positions.index("dropout_p") if seeded else None
    written = frozenset(a.name for a in arguments if a.alias_info is not None and a.alias_info.is_write).union(
        _QUIET_WRITES.get(kernels.op_names(func)[1], ()))

    def compared(args: tuple, kwargs: dict | None) -> Any:
        if getattr(_LOCAL, "busy", False):
            return handler(args, kwargs)
        phase = _phase()
        if dropout_at is not None and _dropout(args, kwargs, dropout_at):
            out = handler(args, kwargs)
            _skip(session, name, plan.function.name, phase, "random op (dropout_p > 0): not compared by value")
            return out
        try:
            call = _Call(func, name, plan.function.name, phase, positions, written, args, kwargs)
        except Exception as exc:  # a debugging switch never breaks the run
            _internal_error(session, name, phase, exc)
            return handler(args, kwargs)
        out = handler(args, kwargs)
        _LOCAL.busy = True
        try:
            call.check(session, out)
        except Exception as exc:
            _internal_error(session, name, phase, exc)
        finally:
            _LOCAL.busy = False
        return out

    return compared


def _dropout(args: tuple, kwargs: dict | None, position: int) -> bool:
    """Whether the call's ``dropout_p`` is non-zero."""
    p = args[position] if len(args) > position else (kwargs or {}).get("dropout_p", 0.0)
    return bool(p)


def _phase() -> str:
    return "backward" if torch._C._current_graph_task_id() != -1 else "forward"


def _internal_error(session: _Session, name: str, phase: str, exc: BaseException) -> None:
    with session.lock:
        first = name not in session.reported
        session.reported.add(name)
    if first:
        _print(f"autocompare:\t{name} {phase}: comparison failed ({type(exc).__name__}: {exc}); the device "
               "result is used, the op is not compared")


def _skip(session: _Session, name: str, function: str, phase: str, message: str) -> None:
    with session.lock:
        session.next_id += 1
        session.calls["skipped"] += 1
        session.add_rows([{"id": session.next_id, "name": name, "phase": phase, "verdict": "SKIP", "index": "-",
                           "message": message, "function": function}])


def _host(t: torch.Tensor) -> torch.Tensor:
    """The host-visible tensor behind an argument or result (a dipu tensor's storage tensor)."""
    raw = t._raw if type(t) is DipuTensor else t
    return raw if raw.device.type == "cpu" else raw.to(_CPU)


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    """A host copy of ``t`` (a dipu tensor's storage tensor) keeping its layout."""
    return cf.host_copy(t._raw if type(t) is DipuTensor else t)


def _map(value: Any, fn: Any) -> Any:
    """``value`` with ``fn`` applied to its tensors and its accelerator devices made the CPU."""
    return map_leaves(value, lambda v: fn(v) if isinstance(v, torch.Tensor) else
                      _CPU if isinstance(v, torch.device) and v.type not in ("cpu", "meta") else v)


def _same_bits(actual: torch.Tensor, before: torch.Tensor) -> bool:
    if torch.equal(actual, before):
        return True
    return compare_tensors(actual, before, atol=0.0, rtol=0.0).verdict == Verdict.PASS  # NaN in the same places


def _renamed(c: TensorComparison, name: str) -> TensorComparison:
    """A comparison of output-path ``out...`` as one of argument ``name``."""
    path = name + c.path[3:]
    return dataclasses.replace(c, path=path, message=c.message.replace(f" {c.path}:", f" {path}:", 1))


class _Call:
    """One compared call: host copies of its arguments, taken before the device runs it."""

    def __init__(self, func: torch._ops.OpOverload, name: str, function: str, phase: str, positions: list[str],
                 written: frozenset[str], args: tuple, kwargs: dict | None) -> None:
        self.func, self.name, self.function, self.phase, self.written = func, name, function, phase, written
        self.args, self.kwargs = args, kwargs or {}
        self.names = [positions[i] if i < len(positions) else f"arg{i}" for i in range(len(args))]
        self.names += list(self.kwargs)
        copies: dict[int, torch.Tensor] = {}

        def copy(t: torch.Tensor) -> torch.Tensor:
            if id(t) not in copies:  # one copy per tensor object: an argument given twice stays aliased
                copies[id(t)] = _host_copy(t)
            return copies[id(t)]

        self.before = [_map(v, copy) for v in (*args, *self.kwargs.values())]

    def _run(self, wide: bool = False) -> tuple[Any, dict[str, Any]]:
        """The op on the CPU copies (written ones cloned first; floating ones float64 with ``wide``): its
        result and the written arguments afterwards, by name."""
        clones: dict[int, torch.Tensor] = {}

        def clone(t: torch.Tensor) -> torch.Tensor:
            if id(t) not in clones:
                clones[id(t)] = _host_copy(t)
            return clones[id(t)]

        values = [_map(v, clone) if n in self.written else v for n, v in zip(self.names, self.before, strict=True)]
        if wide:
            values = widen(values)
        n = len(self.args)
        with torch.no_grad():
            out = self.func(*values[:n], **dict(zip(self.names[n:], values[n:], strict=True)))
        return out, {name: v for name, v in zip(self.names, values, strict=True) if name in self.written}

    def check(self, session: _Session, out: Any) -> None:
        """Judge the device's result ``out`` and its arguments after the call; write the rows and the line."""
        given = [*self.args, *self.kwargs.values()]
        lines: list[str] = []
        rows: list[dict[str, Any]] = []
        written_storages = {_host(t).untyped_storage().data_ptr()
                            for n, v in zip(self.names, given, strict=True) if n in self.written for t in tensors_in(v)}
        for name, value, before in zip(self.names, given, self.before, strict=True):
            if name in self.written:
                continue
            tensors, copies = tensors_in(value), tensors_in(before)
            for k, (t, b) in enumerate(zip(tensors, copies, strict=True)):
                host = _host(t)
                if host.untyped_storage().data_ptr() in written_storages or _same_bits(host, b):
                    continue
                label = name if len(tensors) == 1 and not isinstance(value, (list, tuple)) else f"{name}[{k}]"
                changed = compare_tensors(host, b, atol=0.0, rtol=0.0, path=f"input {label}")
                lines.append(f"input {label} modified")
                rows.append(self._row("FAIL", f"input {label}", changed, host,
                                      message=f"input {label} modified by the device kernel: {changed.message}"))
        try:
            expected, expected_written = self._run()
        except Exception as exc:
            self._finish(session, rows, lines, skip=f"no CPU reference: {type(exc).__name__}: {exc}")
            return
        wide_cache: list[tuple[Any, dict[str, Any]]] = []

        def wide() -> tuple[Any, dict[str, Any]]:
            if not wide_cache:
                wide_cache.append(self._run(wide=True))
            return wide_cache[0]

        returned = {id(t) for t in tensors_in(out)}
        actual = _map(out, _host)
        judged = [] if out is None and expected is None else \
            _pair(judge_outputs(actual, expected, lambda: wide()[0], op=self.name), actual)
        out_leaves = leaves(out)
        if len(out_leaves) == len(judged):  # an in-place or out= result is named by its argument (``self``, ``out``)
            by_id = {id(v): n for n, v in zip(self.names, given, strict=True) if n in self.written}
            judged = [(_renamed(c, by_id[id(t)]) if id(t) in by_id and c.path == "out" else c, leaf)
                      for (c, leaf), t in zip(judged, out_leaves, strict=True)]
        for name, value in zip(self.names, given, strict=True):
            if name not in self.written or all(id(t) in returned for t in tensors_in(value)):
                continue
            device_value = _map(value, _host)
            comparisons = judge_outputs(device_value, expected_written[name], lambda n=name: wide()[1][n],
                                        op=self.name)
            judged += [(_renamed(c, name), leaf) for c, leaf in _pair(comparisons, device_value)]
        for c, leaf in judged:
            rows.append(self._row(VERDICT_NAMES[c.verdict], c.path, c, leaf))
        fails = [c for c, _ in judged if c.verdict == Verdict.FAIL]
        if fails:
            worst = max(fails, key=lambda c: c.max_abs_error if c.max_abs_error == c.max_abs_error else float("inf"))
            detail = worst.message.replace(f" {worst.path}:", ":", 1)
            lines.insert(0, f"not_close max_abs_diff={worst.max_abs_error:.6g} "
                            f"max_rel_diff={worst.max_rel_error:.6g} at {worst.path} ({detail})")
        self._finish(session, rows, lines)

    def _row(self, verdict: str, index: str, c: TensorComparison | None, leaf: Any, **fields: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"id": 0, "name": self.name, "phase": self.phase, "verdict": verdict, "index": index}
        if c is not None:
            row.update(max_abs_diff=c.max_abs_error, max_rel_diff=c.max_rel_error, cosine=c.cosine_similarity,
                       atol=c.atol, rtol=c.rtol, message=c.message)
        if isinstance(leaf, torch.Tensor):
            row.update(dtype=str(leaf.dtype).removeprefix("torch."), shape=list(leaf.shape))
        row["function"] = self.function
        row.update(fields)
        return row

    def _finish(self, session: _Session, rows: list[dict[str, Any]], lines: list[str], skip: str = "") -> None:
        with session.lock:
            session.next_id += 1
            call_id = session.next_id
            for row in rows:
                row["id"] = call_id
            if skip:
                rows.append({"id": call_id, "name": self.name, "phase": self.phase, "verdict": "SKIP", "index": "-",
                             "message": skip, "function": self.function})
                first = self.name not in session.reported
                session.reported.add(self.name)
                if first:
                    lines.append(f"skipped ({skip}); further calls of {self.name} are skipped silently")
            verdict = "not_close" if any(r["verdict"] == "FAIL" for r in rows) else (
                "skipped" if skip else "allclose")
            session.calls[verdict] += 1
            if verdict == "allclose":
                key = (self.name, self.phase)
                session.lines[key] += 1
                if session.lines[key] <= ALLCLOSE_LINES:
                    note = " (further allclose calls are counted, not printed)" if session.lines[key] == \
                        ALLCLOSE_LINES else ""
                    lines.append(f"allclose{note}")
            session.add_rows(rows)
        for line in lines:
            _print(f"autocompare:\t{self.name} {self.phase}: {line}")


def _pair(comparisons: list[TensorComparison], value: Any) -> list[tuple[TensorComparison, Any]]:
    """Each comparison with its leaf of ``value`` (None for all when the structures differ)."""
    found = leaves(value)
    if len(found) != len(comparisons):
        found = [None] * len(comparisons)
    return list(zip(comparisons, found, strict=True))
