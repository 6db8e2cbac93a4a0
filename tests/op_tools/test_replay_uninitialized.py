"""Replay skips the values of uninitialised outputs (``torch.empty`` & co.), as live auto-compare does."""

from __future__ import annotations

from pathlib import Path

import torch

import op_tools
from op_tools.replay import find_cases, replay_case


def test_empty_cases_pass_with_their_values_skipped(tmp_path: Path) -> None:
    with op_tools.OpCapture(results_dir=tmp_path / "cap", run_id="r", device="cpu"):
        x = torch.ones(4, 3)
        torch.empty(5, 2)
        torch.empty_like(x)
        x.new_empty((2, 2))
        x * 2
    results = {(r := replay_case(path)).op: r for path in find_cases(tmp_path / "cap")}
    empties = {op: r for op, r in results.items() if "empty" in op}
    assert len(empties) == 3, sorted(results)
    for op, result in empties.items():
        assert result.status == "PASS" and result.forward == "SKIP (uninitialized)", (op, result.as_row())
    multiplied = [r for op, r in results.items() if op.endswith("mul")]
    assert multiplied and all(r.status == "PASS" and r.forward == "PASS" for r in multiplied)
