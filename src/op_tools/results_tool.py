"""The base of the tools that write a results table (OpAutoCompare, OpOverflowCheck, OpFallback, OpDtypeCast,
OpTimeMeasure): the ``results_dir`` / ``run_id`` keywords, the run folder, the table and its read-back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from op_tools.protocol import print_line
from op_tools.results import ResultTable, choose_run_dir
from op_tools.tool import OpTool

__all__ = ["ResultsTool"]


class ResultsTool(OpTool):
    """An :class:`~op_tools.tool.OpTool` writing rows to ``<results>/<results_folder>/<run>/rank<r>/``; every row
    has a ``rank`` column, and in a multi-process launch every rank picks the same ``<run>``
    (:func:`op_tools.config.run_id`).

    The folder is chosen at the first :meth:`start` and kept for the tool's life (a tool started again
    appends to it). Subclasses set :attr:`results_folder` and, for their own CSV columns,
    :attr:`table_class`; they add rows with ``self.table.add(row)`` and say what they found in
    :meth:`summary_lines`, printed at :meth:`stop`.

    Keywords: those of :class:`~op_tools.tool.OpTool`, ``results_dir`` [``OP_TOOLS_RESULTS_DIR``] and
    ``run_id`` [``OP_TOOLS_RUN_ID``].
    """

    results_folder = "op_tool"
    table_class: type[ResultTable] = ResultTable

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None,
                 results_dir: str | os.PathLike[str] | None = None, run_id: str | None = None) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps)
        self.results_dir = results_dir
        self.run_id = run_id
        self.run_dir: Path | None = None
        self.table: ResultTable | None = None

    def on_start(self) -> None:
        if self.run_dir is None:
            self.run_dir = choose_run_dir(self.results_folder, self.results_dir, self.run_id)
            self.table = self.table_class(self.name, self.run_dir, print_line)  # rows carry the rank

    def on_stop(self) -> None:
        if self.table is not None:
            self.table.close()
        for line in self.summary_lines():
            print_line(line)

    def summary_lines(self) -> list[str]:
        """The console lines printed at :meth:`stop` (default: the table's verdict counts)."""
        return [self.table.summary_line()] if self.table is not None else []

    @property
    def results(self) -> list[dict[str, Any]]:
        """Every row written so far (read back from ``results.jsonl``)."""
        return self.table.rows if self.table is not None else []

    @property
    def counts(self) -> dict[str, int]:
        """Rows per verdict."""
        return dict(self.table.counts) if self.table is not None else {}
