"""The checking tools print one console line per (op name, step) with the number of FAIL rows and the worst
one, and keep every row in the results files (diopi.step_lines)."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import OpAutoCompare
from op_tools.overflow import OpOverflowCheck
from op_tools.results import read_rows
from torch_dipu.vendors.droplet import switches

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402

LINE = re.compile(r"^(\w+): step (\d+): (\S+): (\d+) FAIL \(worst: (.*)\)$")
STEPS, CALLS = 3, 7


def lines(err: str, tool: str) -> list[tuple[int, str, int, str]]:
    """(step, op name, FAIL count, worst) of ``tool``'s per-step lines; any other line naming an op FAIL
    (the old one-line-per-FAIL format) fails the test."""
    found = []
    for line in err.splitlines():
        match = LINE.match(line)
        if match and match.group(1) == tool:
            found.append((int(match.group(2)), match.group(3), int(match.group(4)), match.group(5)))
        else:
            assert not line.startswith(f"{tool}: FAIL "), line
    return found


def fail_rows_by_op_step(run_dir: Path) -> Counter[tuple[int, str]]:
    return Counter((r["step"], r["name"]) for r in read_rows(run_dir) if r["verdict"] == "FAIL")


def test_autocompare_prints_one_line_per_op_and_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = torch.randn(8, 8, device="dipu")
    b = torch.randn(8, 8, device="dipu")
    first = op_tools.current_step()
    with switches(faults="mm:bias:0.5"), OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        for step in range(STEPS):
            for _ in range(CALLS):
                torch.mm(a, b)
                torch.add(a, b)  # correct: no line
            if step == 1:  # the first call of step 2 printed step 1's line, before the tool stops
                err = capsys.readouterr().err
                assert [(s, n, c) for s, n, c, _ in lines(err, "OpAutoCompare")] == [(first, "torch.mm", CALLS)]
            op_tools.next_step()
    err = capsys.readouterr().err
    printed = lines(err, "OpAutoCompare")
    assert [(s, n, c) for s, n, c, _ in printed] == [(first + k, "torch.mm", CALLS) for k in (1, 2)]
    assert all(w.startswith("#") and " forward out: max abs diff 0.5" in w and "torch.mm(a, b)" in w
               for *_, w in printed)
    rows = fail_rows_by_op_step(tool.run_dir)
    assert rows == {(first + k, "torch.mm"): CALLS for k in range(STEPS)}  # every FAIL row is kept
    assert len(tool.failures) == STEPS * CALLS and tool.counts["PASS"] == STEPS * CALLS
    assert re.search(r"^OpAutoCompare: \d+ checks: .* FAIL \(first FAIL: torch.mm ", err, re.MULTILINE)


def test_autocompare_w1_steps_print_one_line_per_op_and_step(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    step = w1_step("dipu")
    with switches(faults="mm:bias:0.5"), OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        step()
        step()
    printed = lines(capsys.readouterr().err, "OpAutoCompare")
    rows = fail_rows_by_op_step(tool.run_dir)
    assert len(rows) == 2 and {n for _, n in rows} == {"torch.nn.functional.linear"}
    assert min(rows.values()) > 10  # a persistent fault: many FAILs per step ...
    assert Counter({(s, n): c for s, n, c, _ in printed}) == rows and len(printed) == len(rows)  # ... one line each


def test_overflow_prints_one_line_per_op_and_step_with_the_worst_call(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.rand(4, 5, device="dipu") + 0.5
    first = op_tools.current_step()
    with OpOverflowCheck(results_dir=tmp_path, device="dipu") as tool:
        for _ in range(STEPS):
            for k in range(CALLS):
                torch.log(x - 1 - int(k == 3))  # NaN where x < 1 (all 20 elements on call 3)
                x * 2
            op_tools.next_step()
    err = capsys.readouterr().err
    printed = lines(err, "OpOverflowCheck")
    rows = fail_rows_by_op_step(tool.run_dir)
    assert sum(rows.values()) == tool.flagged == len(tool.results) and set(rows) == {
        (first + k, "torch.log") for k in range(STEPS)}
    assert Counter({(s, n): c for s, n, c, _ in printed}) == rows and len(printed) == len(rows)
    assert all(" forward out[0]: 20 NaN, 0 Inf (inputs finite) at " in w for *_, w in printed)  # the worst call
    assert "first producer: torch.log #" in err


def test_step_lines_keep_the_worst_and_print_steps_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    from diopi.step_lines import StepLines

    out = StepLines("T")
    out.poll(1)  # nothing pending: nothing printed
    out.add(1, "a", 1, 0.5, "half")
    out.add(1, "b", 2, 1.0, "one")
    out.add(1, "a", 1, float("nan"), "nan")
    out.add(1, "a", 1, 2.0, "two")  # NaN stays the worst
    out.poll(1)
    assert capsys.readouterr().err == ""
    out.add(2, "a", 1, 0.1, "late")
    out.poll(2)
    assert capsys.readouterr().err.splitlines() == ["T: step 1: a: 3 FAIL (worst: nan)",
                                                    "T: step 1: b: 2 FAIL (worst: one)"]
    out.flush()
    assert capsys.readouterr().err.splitlines() == ["T: step 2: a: 1 FAIL (worst: late)"]
    assert out.printed == 3 and not out.pending
