"""The files of ``OpCapture(mode="stats")``: ``stats.jsonl`` (one line per call and phase, the statistics
of its tensors by key) and ``stats.csv`` (one row per tensor). Both are appended as rows arrive, through
large buffers, so nothing is re-read or converted at the end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import IO, Any

__all__ = ["CSV_FIELDS", "StatsTable"]

#: The columns of ``stats.csv``.
CSV_FIELDS = ("id", "op", "step", "phase", "tensor", "shape", "dtype", "numel", "min", "max", "mean", "std",
              "norm", "nan", "inf", "rank")
_BUFFER = 1 << 20


class StatsTable:
    """Appends statistics rows to ``run_dir/stats.jsonl`` and ``run_dir/stats.csv``.

    Files are opened on the first row (and reopened in append mode after :meth:`close`, for a backward
    pass that ends after the tool stopped). ``OSError`` propagates to the caller, which decides what a
    failed write means."""

    def __init__(self, run_dir: Path, rank: int = 0) -> None:
        self.run_dir = run_dir
        self.rank = rank  # the process's rank, on every row
        self.bytes_written = 0
        self._jsonl: IO[str] | None = None
        self._csv_file: IO[str] | None = None

    def _open(self) -> None:
        self._jsonl = open(self.run_dir / "stats.jsonl", "a", encoding="utf-8", buffering=_BUFFER)  # noqa: SIM115
        csv_path = self.run_dir / "stats.csv"
        new = not csv_path.exists() or csv_path.stat().st_size == 0
        self._csv_file = open(csv_path, "a", newline="", encoding="utf-8", buffering=_BUFFER)  # noqa: SIM115
        if new:
            csv.writer(self._csv_file).writerow(CSV_FIELDS)

    def add(self, row: dict[str, Any]) -> None:
        """Append one call's row: ``id``, ``op``, ``step``, ``phase`` and ``tensors`` (key -> statistics
        with ``shape`` and ``dtype``), plus any other JSON fields.

        Each tensor's numbers are formatted once and used in both files (the step pays for 1,000+ rows)."""
        if self._jsonl is None:
            self._open()
        head = f'{row["id"]},{row["op"]},{row["step"]},{row["phase"]},'
        parts = []
        lines = []
        for key, t in row["tensors"].items():
            shape = "[" + ", ".join(map(str, t["shape"])) + "]"
            numel, nan, inf = t["numel"], t["nan"], t["inf"]
            mn, mx, mean, std, norm = _numbers((t["min"], t["max"], t["mean"], t["std"], t["norm"]))
            parts.append(f'"{key}": {{"shape": {shape}, "dtype": "{t["dtype"]}", "numel": {numel}, "nan": {nan}, '
                         f'"inf": {inf}, "min": {mn}, "max": {mx}, "mean": {mean}, "std": {std}, "norm": {norm}}}')
            cells = ",".join("" if v == "null" else v for v in (mn, mx, mean, std, norm))
            lines.append(f'{head}{key},"{shape}",{t["dtype"]},{numel},{cells},{nan},{inf},{self.rank}\n')
        fields = {k: v for k, v in row.items() if k != "tensors"}
        fields.setdefault("rank", self.rank)
        text = json.dumps(fields, allow_nan=False)[:-1] + ', "tensors": {' + ", ".join(parts) + "}}\n"
        self._jsonl.write(text)
        self._csv_file.write("".join(lines))
        self.bytes_written += len(text)

    def close(self) -> None:
        """Flush and close both files (idempotent)."""
        for f in (self._jsonl, self._csv_file):
            if f is not None:
                f.close()
        self._jsonl = self._csv_file = None


def _numbers(values: tuple[float | None, ...]) -> list[str]:
    """JSON numbers (the statistics are over finite elements; None when there are none)."""
    if None not in values and math.isfinite(sum(values)):
        return list(map(repr, values))
    return ["null" if v is None or not math.isfinite(v) else repr(float(v)) for v in values]
