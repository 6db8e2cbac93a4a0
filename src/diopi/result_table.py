"""The results table of every checking tool: one row per judged tensor (or per call), appended as it comes to
``results.jsonl`` and ``results.csv`` in the tool's run folder ``<results>/<tool>/<run>/rank<r>/``.

Used by op_tools' checking tools (:mod:`op_tools.results` re-exports it) and by torch_dipu's device-level
auto-compare. Rows are not kept in memory (a long run makes millions): :attr:`ResultTable.rows` reads them back
from the JSONL file, and the summary is counted as rows arrive.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from diopi.compare import Verdict
from diopi.env import env_int
from diopi.tensor_walk import map_leaves

__all__ = ["COLUMNS", "VERDICTS", "VERDICT_NAMES", "ResultTable", "default_run_id", "free_run_dir", "json_value",
           "launch_run_id", "print_line", "process_rank", "process_world_size", "rank_prefix", "read_rows"]

#: The columns of ``results.csv`` (``results.jsonl`` has the same keys, plus any extra fields a tool adds).
#: ``rank`` (the process's rank, on every row) is last, so readers of the older files by position still work.
COLUMNS = ("id", "name", "phase", "verdict", "index", "max_abs_diff", "max_rel_diff", "cosine", "atol", "rtol",
           "step", "dtype", "shape", "message", "case_dir", "call_site", "rank")
#: Verdicts, best first. ``NOISE``: outside the tolerance but no worse than the CPU in the same dtype.
VERDICTS = ("PASS", "NOISE", "SKIP", "FAIL")
#: The ``verdict`` column of a comparison's :class:`~diopi.compare.Verdict`.
VERDICT_NAMES = {Verdict.PASS: "PASS", Verdict.PASS_NOISE: "NOISE", Verdict.FAIL: "FAIL"}
_BUFFER = 1 << 20


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def process_rank() -> int:
    """This process's rank: ``torch.distributed`` when initialized, else ``RANK`` (0 when unset or not an
    integer)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return env_int("RANK", 0)


_TIME_FORMAT = "%Y-%m-%d--%H-%M-%S"


def process_world_size() -> int:
    """The number of ranks: ``torch.distributed``'s when initialized, else ``WORLD_SIZE`` (1 when unset or not an
    integer)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return env_int("WORLD_SIZE", 1, minimum=1)


def rank_prefix() -> str:
    """``"[rank1] "`` in a process that is one rank of several (``WORLD_SIZE`` > 1, or an initialized
    ``torch.distributed`` group of more than one process), else ``""``."""
    try:
        several = process_world_size() > 1
    except RuntimeError:  # a group being torn down
        several = False
    return f"[rank{process_rank()}] " if several else ""


def print_line(text: str) -> None:
    """Console output of the tools (stderr, so a program's own output stays clean), each line prefixed with
    the rank in a multi-process run (:func:`rank_prefix`)."""
    prefix = rank_prefix()
    if prefix:
        text = "\n".join(prefix + line for line in text.split("\n"))
    sys.stderr.write(text + "\n")  # one write: lines of several ranks sharing a pipe do not interleave
    sys.stderr.flush()


def default_run_id() -> str:
    """The ``<run>`` folder name when none is given: the time now (``2025-01-31--14-05-09``), or in one rank of a
    multi-process launch the same name on every rank of the launch (:func:`launch_run_id`)."""
    return launch_run_id() or time.strftime(_TIME_FORMAT)


def launch_run_id(environ: dict[str, str] | None = None, parent: int | None = None) -> str | None:
    """In a process that is one rank of several (``WORLD_SIZE`` > 1: torchrun, or any launcher that sets it),
    a ``<run>`` name every rank started by the same launcher process shares: that process's start time and
    pid (``2025-01-31--14-05-09-4242``; torchrun's agent is the parent of every worker on its node), plus
    ``-restart<N>`` when torchrun restarted the workers (``TORCHELASTIC_RESTART_COUNT``). None otherwise."""
    env = os.environ if environ is None else environ
    if env_int("WORLD_SIZE", 1, minimum=1, env=env) <= 1:
        return None
    parent = os.getppid() if parent is None else parent
    started = _start_time(parent)
    run = f"{time.strftime(_TIME_FORMAT, time.localtime(started)) if started is not None else 'launch'}-{parent}"
    restart = env_int("TORCHELASTIC_RESTART_COUNT", 0, env=env)
    return run if restart == 0 else f"{run}-restart{restart}"


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from ``/proc`` (None where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def free_run_dir(tool_root: Path, run_id: str, rank: int) -> Path:
    """``tool_root/<run_id>/rank<rank>``, or ``<run_id>-2``, ``-3``, ... when that folder already has files."""
    run_dir = tool_root / run_id / f"rank{rank}"
    n = 2
    while run_dir.exists() and any(run_dir.iterdir()):
        run_dir = tool_root / f"{run_id}-{n}" / f"rank{rank}"
        n += 1
    return run_dir


def json_value(value: Any) -> Any:
    """``value`` (nested dicts and lists too) with NaN as null and infinities as ``"inf"``/``"-inf"``: how a
    results row holds a non-finite number, since JSON has none."""
    return map_leaves(value, lambda v: v if not isinstance(v, float) or math.isfinite(v) else
                      None if math.isnan(v) else ("inf" if v > 0 else "-inf"))


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a ``results.jsonl`` file (or of the ``results.jsonl`` in a folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.jsonl"
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON row ({exc})") from None
    return rows


class ResultTable:
    """Appends result rows to ``run_dir/results.jsonl`` and ``run_dir/results.csv`` and counts verdicts.

    ``tool`` names the tool in console lines; ``print_line`` prints them (default: stderr). A write error
    stops writing with one line; the counts go on. A subclass may set :attr:`columns` (the CSV header; the
    JSONL rows keep every key). Every row gets a ``rank`` (``rank``, default :func:`process_rank` now) unless
    it has one.
    """

    columns: tuple[str, ...] = COLUMNS

    def __init__(self, tool: str, run_dir: Path, print_line: Callable[[str], None] | None = None,
                 rank: int | None = None) -> None:
        self.tool = tool
        self.run_dir = run_dir
        self.rank = process_rank() if rank is None else rank
        self.print_line = print_line or _stderr_line
        self.counts: Counter[str] = Counter()  # verdict -> rows
        self.by_op: dict[str, Counter[str]] = {}  # op name -> verdict -> rows
        self.first_fail: dict[str, Any] | None = None
        self.failed_write: str | None = None
        self._jsonl: IO[str] | None = None
        self._csv_file: IO[str] | None = None
        self._csv: Any = None

    @property
    def jsonl_path(self) -> Path:
        return self.run_dir / "results.jsonl"

    @property
    def csv_path(self) -> Path:
        return self.run_dir / "results.csv"

    def _open(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        new_csv = not self.csv_path.exists()
        self._jsonl = open(self.jsonl_path, "a", encoding="utf-8", buffering=_BUFFER)  # noqa: SIM115
        self._csv_file = open(self.csv_path, "a", newline="", encoding="utf-8", buffering=_BUFFER)  # noqa: SIM115
        self._csv = csv.writer(self._csv_file)
        if new_csv:
            self._csv.writerow(self.columns)

    def add(self, row: dict[str, Any]) -> None:
        """Append one row (keys of :data:`COLUMNS`; missing ones are empty; ``rank`` is added)."""
        if "rank" not in row:
            row["rank"] = self.rank
        verdict = row.get("verdict", "")
        self.counts[verdict] += 1
        self.by_op.setdefault(row.get("name", ""), Counter())[verdict] += 1
        if verdict == "FAIL" and self.first_fail is None:
            self.first_fail = row
        if self.failed_write is not None:
            return
        try:
            if self._jsonl is None:
                self._open()
            try:
                text = json.dumps(row, allow_nan=False)
            except ValueError:  # NaN or infinite metrics: null / "inf" / "-inf"
                text = json.dumps(json_value(row), allow_nan=False)
            self._jsonl.write(text + "\n")
            self._csv.writerow(["" if (v := row.get(c)) is None else v for c in self.columns])
        except (OSError, ValueError, TypeError) as exc:
            self.failed_write = f"writing {self.jsonl_path} failed ({getattr(exc, 'strerror', None) or exc})"
            self.print_line(f"{self.tool}: {self.failed_write}; results are still counted")

    def flush(self) -> None:
        for f in (self._jsonl, self._csv_file):
            if f is not None:
                f.flush()

    def close(self) -> None:
        """Flush and close the files (idempotent; a later :meth:`add` appends)."""
        for f in (self._jsonl, self._csv_file):
            if f is not None:
                f.close()
        self._jsonl = self._csv_file = self._csv = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every row written so far, read back from ``results.jsonl``."""
        self.flush()
        return read_rows(self.jsonl_path) if self.jsonl_path.is_file() else []

    def summary_line(self) -> str:
        """``OpAutoCompare: 1234 checks: 1200 PASS, 30 NOISE, 2 SKIP, 2 FAIL (first: torch.mm #17 forward)``."""
        total = sum(self.counts.values())
        parts = ", ".join(f"{self.counts[v]} {v}" for v in VERDICTS if self.counts[v])
        first = ""
        if self.first_fail is not None:
            f = self.first_fail
            first = f" (first FAIL: {f.get('name')} #{f.get('id')} {f.get('phase')} {f.get('index')})"
        return f"{self.tool}: {total} checks: {parts or 'none'}{first}; results in {self.run_dir}"
