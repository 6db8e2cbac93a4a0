"""OpAutoCompare: clean runs stay silent, faults are found at the faulted op first, FAIL cases replay."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import OpAutoCompare
from op_tools.replay import ReplayOptions, replay_case
from op_tools.results import COLUMNS
from torch_dipu.vendors.droplet import switches

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import W1, w1_step  # noqa: E402


def _model(kind: str, mode: str) -> tuple[torch.nn.Module, torch.Tensor]:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if kind == "w1":
        model, vocab = LlamaForCausalLM(LlamaConfig(**W1)), W1["vocab_size"]
    else:
        config = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        model, vocab = Qwen2ForCausalLM(config), 512
    model = model.to("dipu")
    if mode == "bf16":
        model = model.to(torch.bfloat16)
    ids = torch.randint(0, vocab, (2, 32), generator=torch.Generator().manual_seed(0)).to("dipu")
    return model, ids


@pytest.mark.parametrize("mode", ["fp32", "autocast", "bf16"])
@pytest.mark.parametrize("kind", ["w1", "qwen2"])
def test_clean_runs_have_no_fail(kind: str, mode: str, tmp_path: Path) -> None:
    model, ids = _model(kind, mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        for _ in range(5):
            with torch.autocast("dipu", dtype=torch.bfloat16, enabled=mode == "autocast"):
                loss = model(input_ids=ids, labels=ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    counts = tool.counts
    assert counts.get("FAIL", 0) == 0, tool.failures[:3]
    assert counts["PASS"] > 1000
    phases = {(r["phase"], r["verdict"]) for r in tool.results}
    assert ("backward", "PASS") in phases and ("forward", "PASS") in phases


def test_losses_are_bitwise_unchanged(tmp_path: Path) -> None:
    plain, checked = w1_step("dipu"), w1_step("dipu")
    expected = [plain() for _ in range(3)]
    with OpAutoCompare(results_dir=tmp_path, report=False):
        actual = [checked() for _ in range(3)]
    assert actual == expected


FAULTS = [
    ("linear:bias:0.5", "torch.nn.functional.linear", "forward"),
    ("mm:noncontig", "torch.nn.functional.linear", "backward"),
    ("silu:noise:0.05", "torch.nn.functional.silu", "forward"),
    ("mul.Tensor:nan", "torch.Tensor.mul", "forward"),
    ("mm:grad:2", "torch.nn.functional.linear", "backward"),
    ("_log_softmax_backward_data:grad:2", "torch.nn.functional.cross_entropy", "backward"),
    ("_foreach_lerp_.*:inplace_lost", "torch._foreach_lerp_", "forward"),
    ("_foreach_addcdiv_.*:bias", "torch._foreach_addcdiv_", "forward"),
    ("linear:nan", "torch.nn.functional.linear", "forward"),
    ("rsqrt:noise:0.05", "torch.rsqrt", "forward"),
    ("add.Tensor:noncontig", "torch.Tensor.add", "forward"),
    ("embedding_dense_backward:grad:2", "torch.nn.functional.embedding", "backward"),
    ("_foreach_mul_.Scalar:noise:0.05", "torch._foreach_mul_", "forward"),
    ("_foreach_sqrt:nan", "torch._foreach_sqrt", "forward"),
]


@pytest.mark.parametrize(("fault", "culprit", "phase"), FAULTS, ids=[f[0] for f in FAULTS])
def test_the_first_fail_is_the_faulted_op(fault: str, culprit: str, phase: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    step = w1_step("dipu")
    with switches(faults=fault), OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        step()
    failures = tool.failures
    assert failures, f"{fault} was not found"
    first = failures[0]
    assert (first["name"], first["phase"]) == (culprit, phase)
    err = capsys.readouterr().err
    fail_lines = [line for line in err.splitlines() if re.match(r"OpAutoCompare: step \d+: ", line)]
    counts = [int(re.search(r": (\d+) FAIL \(worst: ", line).group(1)) for line in fail_lines]
    assert sum(counts) == len(failures) and culprit in fail_lines[0]  # one line per (op, step)
    assert len(fail_lines) == len({(r["name"], r["step"]) for r in failures})
    assert f"first FAIL: {culprit}" in err


def test_in_place_ops_are_checked_against_the_original_inputs(tmp_path: Path) -> None:
    x = torch.arange(4.0, device="dipu")
    with switches(faults="add_.Tensor:inplace_lost"), OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        x.add_(torch.ones(4, device="dipu"))
        y = x * 2  # correct: the lost write is not this op's fault
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0]
    rows = {(r["name"], r["index"]): r["verdict"] for r in tool.results}
    assert rows[("torch.Tensor.add_", "out")] == "FAIL"
    assert rows[("torch.Tensor.add_", "input[0] (after)")] == "FAIL"
    assert rows[("torch.Tensor.mul", "out")] == "PASS"


def test_random_and_valueless_ops_are_skipped_and_counted(tmp_path: Path) -> None:
    x = torch.ones(8, device="dipu")
    with OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        torch.nn.functional.dropout(x, 0.5)
        torch.rand(3, device="dipu")
        torch.empty_like(x)
        x + 1
    verdicts = {r["name"]: (r["verdict"], r.get("message")) for r in tool.results}
    assert verdicts["torch.nn.functional.dropout"] == ("SKIP", "random op")
    assert verdicts["torch.rand"] == ("SKIP", "random op")
    assert verdicts["torch.empty_like"] == ("SKIP", "no comparable value")
    assert verdicts["torch.Tensor.add"][0] == "PASS" and tool.counts["SKIP"] == 3


def test_tolerances_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.full((16,), 3.0, device="dipu")
    with switches(faults="add.Tensor:bias:0.0001"):
        with OpAutoCompare(results_dir=tmp_path / "a", report=False) as strict:
            x + x
        monkeypatch.setenv("ADD_AUTOCOMPARE_ERROR_TOLERANCE_FLOAT32", "1e-3,0")
        with OpAutoCompare(results_dir=tmp_path / "b", report=False) as loose:
            x + x
        with OpAutoCompare(results_dir=tmp_path / "c", report=False, atol=0.0, rtol=0.0) as keyword:
            x + x
    assert strict.counts == {"FAIL": 1}
    assert loose.counts == {"PASS": 1} and loose.results[0]["atol"] == 1e-3
    assert keyword.counts == {"FAIL": 1}


def test_rows_files_and_saved_case_replay(tmp_path: Path) -> None:
    x = torch.randn(3, 5, device="dipu", requires_grad=True)
    w = torch.randn(4, 5, device="dipu", requires_grad=True)
    with switches(faults="linear:bias:0.5"):
        with OpAutoCompare(results_dir=tmp_path, run_id="r") as tool:
            torch.nn.functional.linear(x, w).sum().backward()
        assert tool.run_dir == tmp_path / "op_autocompare" / "r" / "rank0"
        header = next(csv.reader((tool.run_dir / "results.csv").open()))
        assert list(header) == list(COLUMNS)
        (fail,) = [r for r in tool.results if r["verdict"] == "FAIL" and r["phase"] == "forward"]
        assert fail["name"] == "torch.nn.functional.linear" and fail["max_abs_diff"] == pytest.approx(0.5)
        assert {"id", "name", "phase", "verdict", "index", "max_abs_diff", "max_rel_diff", "cosine", "atol", "rtol",
                "call_site"} <= set(fail)
        case_dir = tool.run_dir / fail["case_dir"]
        assert (case_dir / "case.json").is_file() and (tool.run_dir / "report.html").is_file()
        faulty = replay_case(case_dir, ReplayOptions(acc_check=True))
        assert faulty.status == "FAIL"
    healthy = replay_case(case_dir, ReplayOptions(acc_check=True))
    assert healthy.status == "PASS", healthy.message


def test_backward_of_every_node_is_checked(tmp_path: Path) -> None:
    """F.linear on 3-D input: the weight's gradient comes from the matmul node, not the output's grad_fn."""
    x = torch.randn(2, 3, 5, device="dipu", requires_grad=True)
    w = torch.randn(4, 5, device="dipu", requires_grad=True)
    with switches(faults="mm:grad:3"), OpAutoCompare(results_dir=tmp_path, report=False) as tool:
        torch.nn.functional.linear(x, w).sum().backward()
    backward = {r["index"]: r["verdict"] for r in tool.results if r["phase"] == "backward"}
    assert backward == {"grad_input[0]": "FAIL", "grad_input[1]": "FAIL"}
