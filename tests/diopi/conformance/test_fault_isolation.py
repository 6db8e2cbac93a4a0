"""The acceptance of the suite: a droplet fault on one DIOPI function fails that function's cases and no other's.

Uses the real family configs (not the small suite of conftest.py): reference data for the functions below is
generated once, then ``run --impl droplet`` is repeated with a ``bias`` fault on each function in turn.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from diopi.conformance import cli

# One function per family at least, forward and backward, aten and custom (diopi::) operators.
FAULTED = [
    "diopiMul",  # elementwise
    "diopiSilu",  # activation
    "diopiSiluBackward",  # a backward function (recorded from the forward's autograd)
    "diopiLogSoftmax",  # activation (reduction-like)
    "diopiMean",  # reduction
    "diopiMm",  # matmul
    "diopiAvgPool2d",  # conv_pool
    "diopiLayerNorm",  # norm
    "diopiMSELoss",  # loss
    "diopiIndexSelect",  # indexing
    "diopiCat",  # shape
    "diopiFusedRMSNorm",  # llm, a custom operator
    "diopiGruCell",  # rnn, a host reference kernel
]


def _outcomes(table: Path) -> Counter:
    with open(table, newline="") as f:
        return Counter((row["function"], row["outcome"]) for row in csv.DictReader(f))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("isolation") / "data"
    assert cli.main(["gen", "--data", str(out), "--functions", ",".join(FAULTED)]) == 0
    return out


def _run(data: Path, table: Path, *extra: str) -> tuple[int, Counter]:
    status = cli.main(["run", "--impl", "droplet", "--data", str(data), "--functions", ",".join(FAULTED), "--csv",
                       str(table), *extra])
    return status, _outcomes(table)


def test_clean_droplet_passes_every_case(data: Path, tmp_path: Path) -> None:
    status, outcomes = _run(data, tmp_path / "clean.csv")
    assert status == 0
    assert {fn for fn, _ in outcomes} == set(FAULTED)
    assert {outcome for _, outcome in outcomes} == {"PASS"}, outcomes


@pytest.mark.parametrize("function", FAULTED)
def test_a_fault_fails_exactly_that_functions_cases(data: Path, tmp_path: Path, function: str) -> None:
    status, outcomes = _run(data, tmp_path / "run.csv", "--impl-option", f"faults={function}:bias:0.5")
    assert status == 1
    failing = {fn for (fn, outcome), n in outcomes.items() if outcome == "FAIL"}
    assert failing == {function}, outcomes
    assert outcomes[(function, "FAIL")] >= outcomes[(function, "PASS")], outcomes  # most of its cases fail
    assert not any(outcome == "ERROR" for _, outcome in outcomes)
