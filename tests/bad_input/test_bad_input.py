"""The bad-input table: every row's command or call gives its one-line message (bad_input_table.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bad_input_table import TRAIN_SCRIPT, Row, judge_call, judge_command, run_command

ROOT = Path(__file__).resolve().parents[2]


def _rows() -> list[Row]:
    import importlib

    rows: list[Row] = []
    for path in sorted(Path(__file__).parent.glob("rows_*.py")):
        rows += importlib.import_module(path.stem).ROWS
    return rows


ROWS = _rows()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN_SCRIPT)
    return tmp_path


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_row(row: Row, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if row.call is not None:
        import torch_dipu  # noqa: F401  (imported with a clean environment: the rows call its parsers)

        for name, value in row.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(workdir)
        judge_call(row)
    else:
        judge_command(row, run_command(row, workdir))


def test_the_table_has_at_least_sixty_rows() -> None:
    assert len({row.id for row in ROWS}) == len(ROWS), "row ids repeat"
    assert len(ROWS) >= 60


def _covered() -> set[str]:
    covered = {name for row in ROWS for name in row.covers}
    covered |= {name for row in ROWS for name in row.env}
    covered |= {f"ditorch {row.argv[1]}" for row in ROWS if row.argv[:1] == ("ditorch",) and len(row.argv) > 1}
    return covered


def test_every_documented_variable_has_a_row() -> None:
    text = (ROOT / "docs" / "environment.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)", text, flags=re.M))
    missing = sorted(name for name in documented
                     if not any(name == c or c.startswith(name) for c in _covered()))
    assert not missing, f"variables of docs/environment.md without a bad-input row: {missing}"


def test_every_subcommand_has_a_row() -> None:
    from ditorch.cli import build_parser

    parser = build_parser()
    subcommands = [name for action in parser._subparsers._group_actions for name in action.choices]
    missing = [name for name in subcommands if f"ditorch {name}" not in _covered()]
    assert not missing, f"ditorch subcommands without a bad-input row: {missing}"
