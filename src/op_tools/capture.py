"""OpCapture: save every matched call (inputs, outputs, and in backward the gradients) as a case.

Cases go to ``<results>/op_capture/<run>/rank<r>/<op>/<id>/`` in the format of :mod:`diopi.case_format`
(``case.json`` + ``tensors.safetensors``; ``backward.safetensors`` once the backward pass has reached the
call). Host copies are taken on the training thread (inputs before the call, so in-place ops keep their
original inputs); files are written by a background thread (:class:`~op_tools.case_writer.CaseWriter`).
Each run also writes ``cases.jsonl`` and ``cases.csv`` (one row per case, with the rank) next to the cases.

A ``torch.distributed`` collective is saved with its inputs before the call and, as its outputs, the tensors
it wrote after the call; ``collective`` in ``case.json`` names its process group (size, this rank in it,
backend) and ``"replayable": false`` says replay skips it (it needs the other ranks).
"""

from __future__ import annotations

import csv
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from diopi import case_format as cf
from diopi.env import ConfigError
from op_tools import config, deferred_stats
from op_tools.case_writer import CaseWriter
from op_tools.collectives import describe
from op_tools.host_buffers import HostBufferPool
from op_tools.protocol import OpCall, Phase, print_line
from op_tools.results import choose_run_dir, process_rank
from op_tools.stats_table import StatsTable
from op_tools.tool import OpTool

__all__ = ["OpCapture"]

MODES = config.CAPTURE_MODES
#: Statistics rows held (their device statistics unread) before they are written; they are also written at
#: each new step, on :meth:`OpCapture.flush` and when the tool stops.
MAX_PENDING_ROWS = 4096


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def op_dir_name(op: str) -> str:
    """An op name as a directory name (``torch.Tensor.add`` stays as it is)."""
    return _UNSAFE.sub("_", op) or "_"


@dataclass
class _CaseState:
    """What one capture keeps between the forward and the backward of a call (no tensors)."""

    case: cf.CaseBuilder | None  # a data capture's case until its forward part is recorded
    input_keys: list[str | None]
    output_keys: list[str | None] = field(default_factory=list)
    case_dir: Path | None = None
    device: str = "cpu"
    written: threading.Event | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    input_versions: list[int] | None = None  # statistics mode: inputs reduced after the call, with the outputs


def _device_stats(keys: list[str], tensors: list[torch.Tensor]) -> dict[str, dict[str, Any]]:
    """Statistics of ``tensors`` (reduced on their device, each object once), with shape and dtype, by key.
    Those of device tensors are filled by the next :func:`op_tools.deferred_stats.resolve` (no host
    synchronisation per call)."""
    if not tensors:
        return {}
    entries = [{"shape": list(t.shape), "dtype": cf.dtype_name(t.dtype)} for t in tensors]
    deferred_stats.defer(tensors, entries)
    return dict(zip(keys, entries, strict=True))


def _nbytes(data: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in data.values())


class OpCapture(OpTool):
    """Capture operator calls as replayable cases.

    Keywords (environment variable in brackets): ``ops``/``disable_ops`` [``OP_CAPTURE_LIST`` /
    ``OP_CAPTURE_DISABLE_LIST``], ``steps`` [``OP_CAPTURE_STEPS``], ``mode`` ``"data"`` or ``"stats"``
    [``OP_CAPTURE_MODE``], ``max_bytes`` [``OP_CAPTURE_MAX_BYTES``, default 10 GiB], ``results_dir``
    [``OP_TOOLS_RESULTS_DIR``], ``run_id`` [``OP_TOOLS_RUN_ID``], ``device`` [``OP_TOOLS_DEVICE``],
    ``verbose`` [``OP_TOOLS_VERBOSE``]. After :meth:`stop`, :attr:`captured` is the number of calls
    captured and :attr:`run_dir` where their cases are.
    """

    env_prefix = "OP_CAPTURE"
    read_config = staticmethod(config.capture_config)
    steps_env = config.CAPTURE_STEPS_ENV
    phases = Phase.BEFORE | Phase.AFTER | Phase.BACKWARD
    backward_needs = "data"

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None, mode: str | None = None,
                 max_bytes: int | str | None = None, results_dir: str | os.PathLike[str] | None = None,
                 run_id: str | None = None, verbose: bool | None = None,
                 queue_bytes: int = 256 * 2**20) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps)
        self.keep_explicit(mode=mode or None, max_bytes=max_bytes, verbose=verbose)
        self.apply_config(self.config)
        self.root = config.results_dir(results_dir) / "op_capture"
        self.run_id = config.run_id(run_id)
        self.queue_bytes = queue_bytes
        self.run_dir: Path | None = None
        self.captured = 0
        self.backward_cases = 0
        self.bytes_queued = 0
        self.bytes_written = 0
        self.cases_written = 0
        self.halted: str | None = None
        self.queue_waits = 0  # times the training thread waited for the writer (the queue was full)
        self._writer: CaseWriter | None = None
        self._index: IO[str] | None = None
        self._stats: StatsTable | None = None
        self._writes_inputs: set[str] = set()  # ops seen writing into inputs their name does not say they write
        self._lock = threading.Lock()
        self._pool = HostBufferPool(queue_bytes)
        self._pending: dict[int, tuple[_CaseState, dict[str, Any], dict[str, torch.Tensor]]] = {}
        self._pending_bytes = 0
        self._pending_step = 0
        self._rows: list[dict[str, Any]] = []  # statistics rows waiting for their device statistics
        self._rows_step = 0
        self._versions = cf.library_versions()
        self._rank = 0

    # -- lifecycle -------------------------------------------------------------------------------------
    def apply_config(self, cfg: config.CaptureConfig) -> None:
        mode = self.explicit("mode", cfg.mode, lambda given: given.strip().lower())
        if mode not in MODES:
            raise ConfigError(f"{config.CAPTURE_MODE_ENV} / mode={mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.backward_needs = "stats" if mode == "stats" else "data"
        self.max_bytes = self.explicit("max_bytes", cfg.max_bytes,
                                       lambda given: config.parse_byte_size(given, config.CAPTURE_MAX_BYTES_ENV))
        self.verbose = self.explicit("verbose", cfg.verbose)

    def _choose_run_dir(self) -> Path:
        self._rank = process_rank()
        return choose_run_dir("op_capture", self.root.parent, self.run_id)

    def on_start(self) -> None:
        if self.run_dir is None:
            self.run_dir = self._choose_run_dir()
        self.halted = None
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            probe = self.run_dir / ".write-test"
            probe.touch()
            probe.unlink()
        except OSError as exc:
            self._halt(f"cannot write to {self.run_dir} ({exc.strerror or exc})")
            return
        self._writer = CaseWriter(self.queue_bytes, threads=2)
        print_line(f"OpCapture: capturing {'statistics' if self.mode == 'stats' else 'cases'} to {self.run_dir}")

    def on_stop(self) -> None:
        self._flush_pending()
        self._flush_rows()
        if self._writer is not None:
            self._writer.close()
            self.queue_waits += self._writer.waits
            if self._index is not None:
                self._index.close()
                self._index = None
            if self._stats is not None:
                self._stats.close()
            if self._writer.failure and not self.halted:
                self.halted = f"writing failed: {self._writer.failure}"
            self._writer = None
            self._pool.clear()
            self._write_csv()
        size = f"{self.bytes_written / 2**20:.1f} MiB"
        print_line(f"OpCapture: {self.captured} calls captured ({self.backward_cases} with gradients), "
                   f"{self.cases_written} cases written, {size}, in {self.run_dir}")

    def flush(self) -> None:
        """Write every case held for its backward pass now (and every statistics row), and wait until all
        are on disk."""
        self._flush_pending()
        self._flush_rows()
        if self._writer is not None:
            self._writer.flush()

    def _halt(self, reason: str) -> None:
        if self.halted is None:
            self.halted = reason
            print_line(f"OpCapture: {reason}; capturing stops, training goes on")

    def _over_budget(self, nbytes: int) -> bool:
        if self.bytes_queued + nbytes > self.max_bytes:
            self._halt(f"byte budget {config.CAPTURE_MAX_BYTES_ENV}={self.max_bytes} reached after "
                       f"{self.captured} calls")
            return True
        return False

    # -- per call --------------------------------------------------------------------------------------
    def before(self, call: OpCall) -> _CaseState | None:
        if self.halted or self._writer is None:
            return None
        if self._pending and call.step != self._pending_step:
            self._flush_pending()  # a new step: calls of earlier steps will not get their backward any more
        if self._rows and call.step != self._rows_step:
            self._flush_rows()  # a new step: read the statistics of the last one (one copy per device)
        if self.mode == "stats":  # no case, only statistics
            keys = [f"i{j}" for j in range(len(call.inputs))]
            state = _CaseState(None, keys)
            if self._may_write_inputs(call):  # reduce the inputs now, before the call changes them
                state.stats = _device_stats(keys, call.inputs)
            else:  # with the outputs, in one device call; the versions tell if the call wrote them after all
                state.input_versions = [t._version for t in call.inputs]
            return state
        case = cf.CaseBuilder(allocate=self._pool.take)
        case.encode_call(call.args, call.kwargs)
        return _CaseState(case, [case.encoder("i").key_of(t) for t in call.inputs])

    def after(self, call: OpCall, state: _CaseState | None, output: Any) -> None:
        if state is None or self._writer is None:
            return
        if self.mode == "stats":
            self._after_stats(call, state)
            return
        case, state.case = state.case, None
        enc = case.encoder("o")
        # A collective returns None or a work handle: its outputs are the tensors it wrote, after the call.
        outputs = enc.encode(list(call.outputs) if call.info.collective else output)
        state.output_keys = [enc.key_of(t) for t in call.outputs]
        data = case.data
        nbytes = _nbytes(data)
        if self._over_budget(nbytes):
            return
        devices = [m["device"] for m in case.meta.values()]
        state.device = next((d for d in devices if cf.device_type(d) == self.device_type), self.device_type)
        state.case_dir = self.run_dir / op_dir_name(call.name) / str(call.call_id)
        self.bytes_queued += nbytes
        self.captured += 1
        record = case.record(
            tool="OpCapture", op=call.name, call_id=call.call_id, step=call.step, rank=self._rank,
            call_site=call.call_site, device=state.device, inplace=call.inplace, random=call.random,
            mode=self.mode, outputs=outputs, versions=self._versions,
            collective=describe(call.name, call.args, call.kwargs) if call.info.collective else None)
        if call.backward_hooked:
            # Hold the case until its backward pass, so that it is written once, gradients included.
            self._pending[call.call_id] = (state, record, data)
            self._pending_step = call.step
            self._pending_bytes += nbytes
            while self._pending_bytes > self.queue_bytes and self._pending:
                self._write_pending(next(iter(self._pending)))
        else:
            self._submit(state, record, data, None)

    def _may_write_inputs(self, call: OpCall) -> bool:
        return call.may_write_inputs() or call.name in self._writes_inputs

    def _after_stats(self, call: OpCall, state: _CaseState) -> None:
        state.output_keys = [f"o{k}" for k in range(len(call.outputs))]
        note = {}
        if state.input_versions is None:  # the call may have written its inputs: their statistics are new
            deferred_stats.forget(call.inputs)
            state.stats.update(_device_stats(state.output_keys, call.outputs))
        else:
            if any(t._version != v for t, v in zip(call.inputs, state.input_versions, strict=True)):
                # The call wrote into an input without saying so (``F.relu(x, True)``, running statistics):
                # this call's input statistics are after the call; later calls of the op reduce them before.
                self._writes_inputs.add(call.name)
                note = {"inputs_after_call": True}
            state.stats = _device_stats([*state.input_keys, *state.output_keys], [*call.inputs, *call.outputs])
        state.device = next((str(t.device) for t in (*call.inputs, *call.outputs)
                             if t.device.type == self.device_type), self.device_type)
        state.case_dir = self.run_dir  # open for its backward pass
        self.captured += 1
        self._write_stats({"id": call.call_id, "op": call.name, "step": call.step, "phase": "forward",
                           "call_site": call.call_site, "device": state.device, "tensors": state.stats, **note})
        state.stats = {}

    def on_backward(self, call: OpCall, state: _CaseState | None, grad_inputs: dict[int, Any],
                    grad_outputs: dict[int, Any]) -> None:
        if state is None or state.case_dir is None or self.halted or self.run_dir is None:
            return
        data: dict[str, torch.Tensor] = {}
        stats: dict[str, Any] = {}
        section = cf.backward_section()
        for grads, keys, field_name in ((grad_inputs, state.input_keys, "grad_inputs"),
                                        (grad_outputs, state.output_keys, "grad_outputs")):
            for index, grad in sorted(grads.items()):
                key = keys[index] if index < len(keys) else None
                if key is None:
                    continue
                if isinstance(grad, dict):  # statistics mode
                    stats[f"g{key}"] = grad
                elif isinstance(grad, torch.Tensor):  # already a host copy (the engine copies it in the hook)
                    cf.add_gradient(section, data, field_name, key, grad, state.device)
        if self.mode == "stats":
            if stats:
                self.backward_cases += 1
                self._write_stats({"id": call.call_id, "op": call.name, "step": call.step, "phase": "backward",
                                   "device": state.device, "tensors": stats})
            state.case_dir = None
            return
        pending = self._pending.pop(call.call_id, None)
        if pending is not None:
            self._pending_bytes -= _nbytes(pending[2])
        if not data or self._over_budget(_nbytes(data)):
            if pending is not None:
                self._submit(*pending, None)
            return
        self.bytes_queued += _nbytes(data)
        self.backward_cases += 1
        if pending is not None:
            _, record, forward_data = pending
            record["backward"] = section
            self._submit(state, record, {**forward_data, **data}, None)
        else:  # the forward part is already written (or being written): add the backward next to it
            case_dir, written = state.case_dir, state.written
            state.case_dir = None
            job = lambda: self._write_backward(case_dir, section, data, written)  # noqa: E731
            if self._writer is not None:
                self._writer.submit(job, _nbytes(data))
            else:  # the backward pass ran after stop(): write it here
                try:
                    job()
                except OSError as exc:
                    self._halt(f"writing the backward of {case_dir} failed ({exc.strerror or exc})")

    def _submit(self, state: _CaseState, record: dict[str, Any], data: dict[str, torch.Tensor],
                written: threading.Event | None) -> None:
        case_dir = state.case_dir
        if not self._writer.submit(lambda: self._write_case(case_dir, record, data, written), _nbytes(data)):
            self._halt(f"writing failed: {self._writer.failure}")
        if record["backward"] is not None:
            state.case_dir = None  # complete: later backward passes (retain_graph) are not recorded

    def _write_pending(self, call_id: int) -> None:
        state, record, data = self._pending.pop(call_id)
        self._pending_bytes -= _nbytes(data)
        state.written = threading.Event()
        self._submit(state, record, data, state.written)

    def _flush_pending(self) -> None:
        for call_id in list(self._pending):
            self._write_pending(call_id)

    # -- writer threads --------------------------------------------------------------------------------
    def _write_stats(self, row: dict[str, Any]) -> None:
        """Queue a statistics row: it is written, in order, once its device statistics have been read."""
        self._rows.append(row)
        self._rows_step = row["step"]
        if len(self._rows) >= MAX_PENDING_ROWS or not self.opened:  # not opened: a backward pass after stop()
            self._flush_rows()

    def _flush_rows(self) -> None:
        """Read every waiting statistic and write the queued rows."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        try:
            deferred_stats.resolve()
        except Exception as exc:
            self._halt(f"reading statistics failed ({type(exc).__name__}: {exc})")
            return
        for row in rows:
            self._write_row(row)

    def _write_row(self, row: dict[str, Any]) -> None:
        """Append a statistics row (on the calling thread: rows are small and the files are buffered)."""
        with self._lock:
            if self._stats is None:
                self._stats = StatsTable(self.run_dir, self._rank)
            try:
                before = self._stats.bytes_written
                self._stats.add(row)
                if not self.opened:  # a backward pass after stop(): do not leave the files open
                    self._stats.close()
            except OSError as exc:
                self._halt(f"writing {self.run_dir / 'stats.jsonl'} failed ({exc.strerror or exc})")
                return
            self.bytes_written += self._stats.bytes_written - before
            self.cases_written += row["phase"] == "forward"

    def _write_case(self, case_dir: Path, record: dict[str, Any], data: dict[str, torch.Tensor],
                    written_event: threading.Event | None) -> None:
        try:
            backward = record["backward"]
            written = cf.write_case(case_dir, record, data if self.mode == "data" else None)
        finally:
            if written_event is not None:
                written_event.set()
            self._pool.give(list(data.values()))
        row = {"id": record["id"], "op": record["op"], "step": record["step"],
               "dir": str(case_dir.relative_to(self.run_dir)), "call_site": record["call_site"],
               "inputs": [m["shape"] for k, m in record["tensors"].items() if k.startswith("i")],
               "dtypes": sorted({m["dtype"] for m in record["tensors"].values()}),
               "backward": backward is not None, "bytes": written, "rank": record["rank"]}
        if record.get("collective") is not None:
            row["collective"] = True
        with self._lock:
            self.bytes_written += written
            self.cases_written += 1
            if self._index is None:
                self._index = open(self.run_dir / "cases.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            self._index.write(json.dumps(row) + "\n")
        if self.verbose:
            print_line(f"OpCapture: {case_dir} saved")

    def _write_backward(self, case_dir: Path, section: dict[str, Any], data: dict[str, torch.Tensor],
                        forward_written: threading.Event | None) -> None:
        if forward_written is not None:
            forward_written.wait()
        case_file = case_dir / cf.CASE_FILE
        if not case_file.is_file():
            return  # the forward part failed to write; the failure is reported once
        record = json.loads(case_file.read_text(encoding="utf-8"))
        written = 0
        if data:
            written += cf.write_tensors(case_dir / cf.BACKWARD_FILE, data)
        record["backward"] = section
        written += cf.write_json(case_file, record)
        with self._lock:
            self.bytes_written += written

    def _write_csv(self) -> None:
        """The run's table of cases as CSV, from the JSONL the writers appended to (one row per case)."""
        if self.run_dir is None or self.mode == "stats":  # statistics mode writes its CSV as it goes
            return
        index = self.run_dir / "cases.jsonl"
        if not index.is_file():
            return
        try:
            rows = [json.loads(line) for line in index.read_text(encoding="utf-8").splitlines() if line.strip()]
            fields = ["id", "op", "step", "dir", "call_site", "inputs", "dtypes", "backward", "bytes", "rank"]
            table = [{**r, "inputs": json.dumps(r["inputs"]), "dtypes": " ".join(r["dtypes"])} for r in rows]
            with cf.atomic_open(index.with_suffix(".csv"), "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(table)
        except (OSError, ValueError, KeyError) as exc:
            print_line(f"OpCapture: could not write {index.with_suffix('.csv')} ({exc})")
