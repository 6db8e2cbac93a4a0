"""``ditorch conformance from-capture``: a real model's captured calls become conformance cases that pass on a
healthy droplet and fail, function by function, on a faulty one."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi.conformance import cli as conformance
from ditorch import cli
from op_tools import OpCapture

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402

transformers = pytest.importorskip("transformers")


def _qwen_step() -> None:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = transformers.Qwen2ForCausalLM(config).to("dipu")
    ids = torch.randint(0, 256, (2, 16), device="dipu")
    model(input_ids=ids, labels=ids).loss.backward()


def _capture(tmp_path: Path, step) -> Path:  # noqa: ANN001
    with OpCapture(results_dir=tmp_path / "cap", run_id="r") as cap:
        step()
    return cap.run_dir


def _run(data: Path, table: Path, *target: str) -> tuple[int, Counter]:
    status = conformance.main(["run", *target, "--data", str(data), "--csv", str(table)])
    with open(table, newline="") as f:
        return status, Counter((row["function"], row["outcome"]) for row in csv.DictReader(f))


@pytest.fixture(scope="module")
def model_cases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("from_capture")
    made = {}
    for name, step in (("w1", w1_step("dipu")), ("qwen2", _qwen_step)):
        capture = _capture(root / name, step)
        out = root / name / "cases"
        assert cli.main(["conformance", "from-capture", str(capture), str(out), "--per-function", "6"]) == 0
        made[name] = out
    return made


@pytest.mark.parametrize("model", ["w1", "qwen2"])
def test_model_cases_pass_on_droplet_and_on_the_dipu_device(model_cases, model: str, tmp_path: Path) -> None:
    data = model_cases[model]
    index = json.loads((data / "from_capture.json").read_text())
    functions = set(index["cases"])
    # forward and backward functions of a transformer, reached through the API-level calls that were captured
    assert {"diopiLinear", "diopiEmbedding", "diopiSiluBackward", "diopiEmbeddingBackward", "diopiMm"} <= functions
    assert max(index["cases"].values()) <= 6
    for target in (["--impl", "droplet"], ["--device", "dipu"]):
        status, outcomes = _run(data, tmp_path / "run.csv", *target)
        assert status == 0, outcomes
        assert {outcome for _, outcome in outcomes} == {"PASS"}, (target, outcomes)
        assert sum(outcomes.values()) == sum(index["cases"].values())


def test_a_fault_fails_only_the_faulty_functions_model_cases(model_cases, tmp_path: Path) -> None:
    status, outcomes = _run(model_cases["w1"], tmp_path / "run.csv", "--impl", "droplet",
                            "--impl-option", "faults=silu_backward:bias:0.5")
    assert status == 1
    assert {fn for (fn, outcome) in outcomes if outcome == "FAIL"} == {"diopiSiluBackward"}, outcomes


def test_an_unreadable_capture_is_skipped_and_the_others_convert(tmp_path: Path, capsys) -> None:
    x = torch.randn(4, 5, device="dipu", requires_grad=True)
    capture = _capture(tmp_path, lambda: torch.nn.functional.silu(x).sum().backward())
    cases = sorted(capture.rglob("case.json"))
    assert len(cases) >= 2
    cases[0].write_text("{not json")
    out = tmp_path / "out"
    assert cli.main(["conformance", "from-capture", str(capture), str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"skipped {cases[0].parent}" in printed and "not valid JSON" in printed
    assert json.loads((out / "from_capture.json").read_text())["cases"]
    assert cli.main(["conformance", "from-capture", str(tmp_path / "missing"), str(out)]) == 2
