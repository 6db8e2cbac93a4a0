"""The wrong-loss walkthrough of docs/vendor_bringup.md section 5, command by command, on droplet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "examples" / "debug_wrong_loss.py")
FAULT = {"DROPLET_FAULTS": "mm:noncontig"}


def run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
        expect: int = 0) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("DIPU_", "DROPLET_", "OP_TOOLS_"))}
    full.update(env or {})
    proc = subprocess.run([sys.executable, *args], env=full, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == expect, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def losses(text: str) -> list[str]:
    return re.findall(r"^step \d+ loss (\S+)$", text, flags=re.M)


@pytest.fixture(scope="module")
def reference() -> list[str]:
    return losses(run([SCRIPT, "--device", "cpu"]))


def test_step0_the_fault_makes_the_loss_wrong(reference: list[str]) -> None:
    assert len(reference) == 5
    assert losses(run([SCRIPT])) == reference  # healthy droplet: the CPU's losses to the printed digit
    faulty = losses(run([SCRIPT], FAULT))
    assert faulty[0] == reference[0] and faulty[-1] != reference[-1]  # the first backward is wrong


def test_step1_conformance_of_the_functions_the_model_uses(tmp_path: Path) -> None:
    text = run([SCRIPT, "--steps", "1"], {**FAULT, "DIPU_DUMP_OP_ARGS": "1"})
    functions = set(re.findall(r"diopi[A-Za-z0-9]+", text))
    assert {"diopiMm", "diopiLinear", "diopiTanh", "diopiMSELoss", "diopiMSELossBackward"} <= functions
    data = str(tmp_path / "cases")
    run(["-m", "diopi.conformance", "gen", "--data", data, "--functions", "diopiMm,diopiTanh"])
    healthy = run(["-m", "diopi.conformance", "run", "--device", "dipu", "--data", data,
                   "--functions", "diopiMm,diopiTanh"])
    assert "FAIL 0" in healthy
    faulty = run(["-m", "diopi.conformance", "run", "--device", "dipu", "--data", data,
                  "--functions", "diopiMm,diopiTanh"], FAULT, expect=1)
    failing = {line.split()[0] for line in faulty.splitlines() if " FAIL" in line and line.startswith("diopi")}
    assert failing == {"diopiMm"}, faulty[-2000:]


def test_step2_autocompare_names_mm_in_backward(tmp_path: Path) -> None:
    text = run([SCRIPT, "--steps", "1"], {**FAULT, "DIPU_AUTOCOMPARE_OPS_LIST": ".*",
                                          "OP_TOOLS_RESULTS_DIR": str(tmp_path)})
    not_close = [line for line in text.splitlines() if "not_close" in line and line.startswith("autocompare:")]
    assert not_close and all(line.startswith("autocompare:\tmm backward: not_close") for line in not_close)
    assert re.search(r"dipu autocompare: \d+ ops compared: \d+ allclose, 2 not_close", text)


def test_step3_dump_shows_the_transposed_input(tmp_path: Path) -> None:
    text = run([SCRIPT, "--steps", "1"], {**FAULT, "DIPU_AUTOCOMPARE_OPS_LIST": "mm", "DIPU_DUMP_OP_ARGS": "2",
                                          "OP_TOOLS_RESULTS_DIR": str(tmp_path)})
    lines = text.splitlines()
    failing = [i for i, line in enumerate(lines) if "mm backward: not_close" in line]
    assert failing
    for i in failing:  # the failing call's arguments are printed just above its verdict
        header = max(j for j in range(i) if lines[j].startswith("[dipu_mm]:mm  diopiMm"))
        arguments = lines[header + 1:i]
        assert any("stride:[1, 16]" in a and "is_view:1" in a for a in arguments), arguments


def test_step4_fallback_brings_the_loss_back(reference: list[str]) -> None:
    assert losses(run([SCRIPT], {**FAULT, "DIPU_FORCE_FALLBACK_OPS_LIST": "mm"})) == reference
