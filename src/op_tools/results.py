"""The results table every checking tool writes (OpAutoCompare, OpOverflowCheck, OpFallback,
OpDtypeCast): one row per judged tensor (or per call), appended as it comes to ``results.jsonl`` and
``results.csv`` in the tool's run folder ``<results>/<tool>/<run>/rank<r>/``.

The table itself lives in :mod:`diopi.result_table` (torch_dipu's device-level auto-compare writes the same
layout); this module re-exports it and picks the run folder from op_tools' settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from diopi.result_table import COLUMNS, VERDICTS, ResultTable, free_run_dir, process_rank, read_rows
from op_tools import config

__all__ = ["COLUMNS", "VERDICTS", "ResultTable", "choose_run_dir", "process_rank", "read_rows"]


def choose_run_dir(tool_dir: str, results_dir: str | os.PathLike[str] | None = None,
                   run_id: str | None = None) -> Path:
    """``<results>/<tool_dir>/<run>/rank<r>``: a new folder (``<run>-2``, ... when one with files exists)."""
    return free_run_dir(config.results_dir(results_dir) / tool_dir, config.run_id(run_id), process_rank())
