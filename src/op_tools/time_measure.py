"""OpTimeMeasure: the forward and backward time of every operator call, and a summary by op name.

Two modes (``mode=`` or ``OP_TIME_MEASURE_MODE``):

- ``event`` (the default on a device with timing events: its module's ``Event``, else ``torch.Event``; see
  :func:`op_tools.device_sync.timing_event_factory`): a timing event is recorded on the current stream before
  and after each call; nothing waits for the device per op. The times are read when the tool stops (or, to
  keep memory bounded, with one synchronization whenever :data:`MAX_PENDING` calls are waiting).
- ``sync`` (the default on the CPU, and the seeds' way): the device is synchronized before and after each
  call (:func:`op_tools.device_sync.synchronizer`) and the host clock (``time.perf_counter``) measures it.

The backward of a call is timed on the autograd nodes the call created, through the engine's one backward
mechanism (:mod:`op_tools.autograd_hooks`, ``Phase.BACKWARD_NODES``): a pre-hook and a post-hook per node
bracket the node's work, and the node times are summed into one ``backward`` row per call when the first
backward pass that reaches it ends.
Collectives of ``torch.distributed`` (``all_reduce``, ``broadcast``, ``barrier``, ...) called while the tool is
active reach it through the engine (:mod:`op_tools.collectives`), named ``torch.distributed.all_reduce`` etc.;
one without a device tensor (``barrier``, object collectives) is timed on the host clock, the device
synchronized before and after.

Output in ``<results>/op_time_measure/<run>/rank<r>/``: ``results.jsonl`` and ``results.csv`` (one row per
call and phase: ``id, name, phase, elapsed_ms, step, call_site``), ``summary.csv`` (by op name and phase:
calls, total, mean, p50, p95, share) and ``timing_report.html`` (a bar chart of the top ops and the summary
table, self-contained). The top of the summary is printed when the tool stops.
"""

from __future__ import annotations

import csv
import math
import os
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from diopi.case_format import atomic_open
from diopi.env import ConfigError
from diopi.html_page import esc, table, write_page
from op_tools import config
from op_tools.device_sync import synchronizer, timing_event_factory
from op_tools.naming import COLLECTIVES, is_collective_name
from op_tools.protocol import OpCall, Phase, Ran, print_line
from op_tools.results import ResultTable
from op_tools.results_tool import ResultsTool

__all__ = ["COLLECTIVES", "MAX_PENDING", "MODES", "OpTimeMeasure"]

MODES = config.TIME_MEASURE_MODES
#: Calls (forward or backward) whose events may wait unread in event mode before one synchronization reads them.
MAX_PENDING = 10_000
_SUMMARY_KEYS = ("name", "phase", "calls", "total_ms", "mean_ms", "p50_ms", "p95_ms", "share")


class _TimingTable(ResultTable):
    columns = ("id", "name", "phase", "elapsed_ms", "step", "call_site", "rank")


class _Timing:
    """One call's clocks (no tensors): its forward start, and the intervals of its backward nodes."""

    __slots__ = ("start", "seconds", "events", "open", "host")

    def __init__(self, start: Any, host: bool = False) -> None:
        self.start = start  # perf_counter seconds (sync, or ``host``) or an event (event)
        self.host = host  # timed on the host clock (a collective without a device tensor)
        self.seconds = 0.0  # backward, sync mode
        self.events: list[tuple[Any, Any]] = []  # backward, event mode
        self.open: dict[int, Any] = {}  # node index -> start (time or event)


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks of sorted ``values`` (numpy's default)."""
    if not values:
        return math.nan
    pos = (len(values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


class OpTimeMeasure(ResultsTool):
    """Time every operator call's forward and backward on the device, and summarize by op name.

    Keywords (environment variable in brackets): ``mode`` ``"event"`` or ``"sync"`` [``OP_TIME_MEASURE_MODE``;
    default event where the device has timing events, sync on the CPU], ``top`` (rows of the summary
    printed at stop, default 20) [``OP_TIME_MEASURE_TOP``], ``ops``/``disable_ops``
    [``OP_TIME_MEASURE_LIST`` / ``OP_TIME_MEASURE_DISABLE_LIST``], ``steps`` [``OP_TIME_MEASURE_STEPS``],
    ``backward`` (also time the backward, default True), ``collectives`` (time ``torch.distributed``
    collectives, default True), ``results_dir`` [``OP_TOOLS_RESULTS_DIR``], ``run_id`` [``OP_TOOLS_RUN_ID``],
    ``device`` [``OP_TOOLS_DEVICE``].

    :attr:`results` are the rows written (``id, name, phase, elapsed_ms, step, call_site``), :meth:`summary`
    the per-op summary. Calls whose inputs are not on the device but whose outputs are (factories, copies
    from the host) are run before the tools see them, so they are not timed (counted in :attr:`untimed`).
    """

    env_prefix = "OP_TIME_MEASURE"
    read_config = staticmethod(config.time_measure_config)
    results_folder = "op_time_measure"
    table_class = _TimingTable
    steps_env = config.TIME_MEASURE_STEPS_ENV
    phases = Phase.BEFORE | Phase.AFTER | Phase.BACKWARD_NODES

    def __init__(self, *, mode: str | None = None, top: int | None = None, ops: str | list[str] | None = None,
                 disable_ops: str | list[str] | None = None, device: str | torch.device | None = None,
                 steps: Any = None, backward: bool = True, collectives: bool = True,
                 results_dir: str | os.PathLike[str] | None = None, run_id: str | None = None) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps, results_dir=results_dir,
                         run_id=run_id)
        self.keep_explicit(mode=mode, top=top)
        self.apply_config(self.config)
        self.backward = backward
        if not backward:
            self.phases = Phase.BEFORE | Phase.AFTER
        self.collectives = collectives
        self.untimed = 0
        self._times: dict[tuple[str, str], array] = {}  # (name, phase) -> milliseconds per call
        self._pending: list[tuple[int, str, str, int, str, list[tuple[Any, Any]]]] = []
        self._lock = threading.Lock()
        self._started_at: float | None = None
        self.block_ms = 0.0

    # -- lifecycle -------------------------------------------------------------------------------------
    def apply_config(self, cfg: config.TimeMeasureConfig) -> None:
        self._new_event = timing_event_factory(self.device_type)
        has_events = self._new_event is not None
        mode = self.explicit("mode", cfg.mode)
        if mode is None:
            mode = "event" if has_events else "sync"
        if mode not in MODES:
            raise ConfigError(f"{config.TIME_MEASURE_MODE_ENV} / mode={mode!r}: expected one of {', '.join(MODES)}")
        if mode == "event" and not has_events:
            raise ValueError(f"OpTimeMeasure: mode='event' needs timing events; the {self.device_type} device has "
                             f"none (use mode='sync')")
        self.mode = mode
        self.top = self.explicit("top", cfg.top)
        self._sync: Callable[[], None] = synchronizer(self.device_type)

    def start(self) -> OpTimeMeasure:
        if not self.active:
            super().start()
            self._started_at = time.perf_counter()
        return self

    def stop(self) -> None:
        if self.active:
            self._sync()
            if self._started_at is not None:
                self.block_ms += (time.perf_counter() - self._started_at) * 1e3
                self._started_at = None
        super().stop()

    end = stop  # the seeds' name (OpTool.end is OpTool.stop)

    def on_stop(self) -> None:
        self._resolve()
        super().on_stop()  # closes the table, prints summary_lines()
        if self.run_dir is not None and self._times:
            try:
                self._write_summary(self.run_dir)
            except OSError as exc:
                print_line(f"{self.name}: writing the summary in {self.run_dir} failed ({exc.strerror or exc})")

    def summary_lines(self) -> list[str]:
        return [self.summary_text()]

    @property
    def results(self) -> list[dict[str, Any]]:
        """Every row written so far (one per call and phase)."""
        self._resolve()
        return super().results

    def acts_on(self, name: str) -> bool:
        if not self.collectives and is_collective_name(name):
            return False
        return super().acts_on(name)

    # -- clocks ----------------------------------------------------------------------------------------
    def _mark(self) -> Any:
        if self.mode == "sync":
            return self._sync_mark()
        event = self._new_event()
        event.record()
        return event

    def _row(self, call_id: int, name: str, phase: str, step: int, site: str, ms: float) -> None:
        with self._lock:
            times = self._times.get((name, phase))
            if times is None:
                times = self._times[(name, phase)] = array("d")
            times.append(ms)
            if self.table is not None:
                self.table.add({"id": call_id, "name": name, "phase": phase, "elapsed_ms": round(ms, 6),
                                "step": step, "call_site": site})

    def _finished(self, call_id: int, name: str, phase: str, step: int, site: str, start: Any, end: Any) -> None:
        """One call's phase has ended (``start``/``end``: a time or an event, or lists of pairs)."""
        if self.mode == "sync":
            self._row(call_id, name, phase, step, site, (end - start) * 1e3)
            return
        pairs = start if isinstance(start, list) else [(start, end)]
        with self._lock:
            self._pending.append((call_id, name, phase, step, site, pairs))
            full = len(self._pending) >= MAX_PENDING
        if full:
            self._resolve()

    def _resolve(self) -> None:
        """Read the events of every waiting call (one synchronization) and write their rows."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        self._sync()
        for call_id, name, phase, step, site, pairs in pending:
            ms = sum(a.elapsed_time(b) for a, b in pairs)
            self._row(call_id, name, phase, step, site, ms)

    # -- forward ---------------------------------------------------------------------------------------
    def before(self, call: OpCall) -> _Timing | None:
        if call.ran is Ran.BEFORE_TOOLS:  # no input on the device: it ran before the tools, its time is unknown
            self.untimed += 1
            return None
        if call.info.collective and not call.inputs:  # barrier, object collectives: the host's time
            return _Timing(self._sync_mark(), host=True)
        return _Timing(self._mark())

    def after(self, call: OpCall, state: _Timing, output: Any) -> None:
        end = self._sync_mark() if state.host else self._mark()
        site = call.call_site
        if self.mode == "sync" or state.host:
            self._row(call.call_id, call.name, "forward", call.step, site, (end - state.start) * 1e3)
        else:
            self._finished(call.call_id, call.name, "forward", call.step, site, state.start, end)

    # -- backward (Phase.BACKWARD_NODES) ---------------------------------------------------------------
    def node_started(self, call: OpCall, state: _Timing, node: int) -> None:
        if self.opened:
            state.open[node] = self._mark()

    def node_finished(self, call: OpCall, state: _Timing, node: int) -> None:
        start = state.open.pop(node, None)
        if start is None or not self.opened:
            return
        end = self._mark()
        if self.mode == "sync":
            state.seconds += end - start
        else:
            state.events.append((start, end))

    def on_backward(self, call: OpCall, state: _Timing, grad_inputs: dict[int, Any],
                    grad_outputs: dict[int, Any]) -> None:
        if not self.opened:
            return
        if self.mode == "sync":
            self._row(call.call_id, call.name, "backward", call.step, call.call_site, state.seconds * 1e3)
        elif state.events:
            events, state.events = state.events, []
            self._finished(call.call_id, call.name, "backward", call.step, call.call_site, events, None)

    def _sync_mark(self) -> float:
        self._sync()
        return time.perf_counter()

    # -- summary ---------------------------------------------------------------------------------------
    def summary(self) -> list[dict[str, Any]]:
        """One entry per op name and phase: ``name, phase, calls, total_ms, mean_ms, p50_ms, p95_ms, share``
        (of the time measured in the block, 0..1), largest total first."""
        self._resolve()
        with self._lock:
            items = [(key, sorted(values)) for key, values in self._times.items()]
        grand = sum(math.fsum(v) for _, v in items) or 1.0
        entries = []
        for (name, phase), values in items:
            total = math.fsum(values)
            entries.append({"name": name, "phase": phase, "calls": len(values), "total_ms": total,
                            "mean_ms": total / len(values), "p50_ms": _percentile(values, 0.5),
                            "p95_ms": _percentile(values, 0.95), "share": total / grand})
        entries.sort(key=lambda e: (-e["total_ms"], e["name"], e["phase"]))
        return entries

    def summary_text(self, top: int | None = None) -> str:
        """The console summary: one line of totals, then the ``top`` entries as a table."""
        entries = self.summary()
        top = self.top if top is None else top
        fwd = sum(e["calls"] for e in entries if e["phase"] == "forward")
        bwd = sum(e["calls"] for e in entries if e["phase"] == "backward")
        measured = sum(e["total_ms"] for e in entries)
        head = f"{self.name} ({self.mode} mode): {fwd} forward and {bwd} backward calls timed, {measured:.3f} ms in ops"
        if self.block_ms > 0:
            head += f" in a {self.block_ms:.1f} ms block"
        if self.untimed:
            head += f" ({self.untimed} calls made on the host untimed)"
        head += f"; results in {self.run_dir}"
        if not entries or top <= 0:
            return head
        shown = entries[:top]
        width = max(len("op"), *(len(e["name"]) for e in shown))
        lines = [head, f"{'op':<{width}}  {'phase':<8} {'calls':>7} {'total ms':>11} {'mean ms':>10} {'p50 ms':>10} "
                       f"{'p95 ms':>10} {'share':>7}"]
        for e in shown:
            lines.append(f"{e['name']:<{width}}  {e['phase']:<8} {e['calls']:>7} {e['total_ms']:>11.3f} "
                         f"{e['mean_ms']:>10.4f} {e['p50_ms']:>10.4f} {e['p95_ms']:>10.4f} {e['share']:>6.1%}")
        if len(entries) > top:
            lines.append(f"... and {len(entries) - top} more (summary.csv)")
        return "\n".join(lines)

    def _write_summary(self, run_dir: Path) -> None:
        entries = self.summary()
        run_dir.mkdir(parents=True, exist_ok=True)
        with atomic_open(run_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(_SUMMARY_KEYS)
            for e in entries:
                writer.writerow([round(e[k], 6) if isinstance(e[k], float) else e[k] for k in _SUMMARY_KEYS])
        write_page(run_dir / "timing_report.html", f"{self.name} ({self.mode} mode): {run_dir}",
                   _body(entries, self, run_dir))


def _body(entries: list[dict[str, Any]], tool: OpTimeMeasure, run_dir: Path, top: int = 30) -> str:
    """The timing page: a bar chart (inline SVG) of the top entries by total time and the summary table."""
    shown = entries[:top]
    biggest = max((e["total_ms"] for e in shown), default=0.0) or 1.0
    label_w, bar_w, row_h = 420, 460, 22
    bars = []
    for i, e in enumerate(shown):
        y = i * row_h
        w = max(1.0, bar_w * e["total_ms"] / biggest)
        color = "#3b6fb6" if e["phase"] == "forward" else "#d9822b"
        bars.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{esc(e["name"])} '
                    f'({esc(e["phase"])})</text><rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                    f'fill="{color}"><title>{e["total_ms"]:.3f} ms in {e["calls"]} calls</title></rect>'
                    f'<text x="{label_w + w + 4:.1f}" y="{y + 15}">{e["total_ms"]:.3f} ms '
                    f'({e["share"]:.1%})</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 160}" height="{len(shown) * row_h}" '
           f'font-family="monospace" font-size="12">{"".join(bars)}</svg>')
    body = []
    for e in entries:
        texts = (f"{e[c]:.1%}" if c == "share" else f"{e[c]:.4f}" if isinstance(e[c], float) else e[c]
                 for c in _SUMMARY_KEYS)
        body.append("<tr>" + "".join(f"<td{'' if i < 2 else ' class=num'}>{esc(t)}</td>" for i, t in enumerate(texts))
                    + "</tr>")
    return (f"<h1>{esc(tool.name)}: time by op</h1><p class=\"meta\">{esc(tool.mode)} mode &middot; device "
            f"{esc(tool.device_type)} &middot; {tool.block_ms:.1f} ms block &middot; written "
            f"{esc(time.strftime('%Y-%m-%d %H:%M:%S'))} &middot; rows in <code>{esc(run_dir / 'results.jsonl')}"
            f"</code></p><h2>Top {len(shown)} by total time (blue: forward, orange: backward)</h2>{svg}"
            f"<h2>Summary</h2>{table(_SUMMARY_KEYS, body)}")
