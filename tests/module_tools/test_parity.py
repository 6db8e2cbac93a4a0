"""``ditorch parity``: a CUDA-written W1 script with dropout, on the CPU and on the device (subprocesses)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from module_tools import parity_command
from module_tools.parity import run_parity
from op_tools.random_on_cpu import OpRandomOnCPU

SCRIPTS = Path(__file__).parent / "scripts"
W1_DROPOUT = str(SCRIPTS / "w1_dropout.py")


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without dipu/droplet/op_tools/dump/ditorch switches, plus ``extra``."""
    prefixes = ("DIPU_", "DROPLET_", "OP_", "MODULE_DUMP_", "DITORCH_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(prefixes)}, **extra}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory):
    """The clean parity run (both runs): the reference dump the other tests reuse."""
    return run_parity(W1_DROPOUT, out=tmp_path_factory.mktemp("clean"), env=_env())


def test_clean_dropout_run_has_no_divergence(clean) -> None:
    assert clean.status == 0, clean.lines
    assert clean.lines[0] == "no divergence in 2 steps"
    assert clean.comparison.steps == [1, 2]
    assert clean.html.is_file() and clean.json.is_file()
    assert f"HTML report: {clean.html}" in clean.lines
    # both runs were ended at the 2nd optimizer.step(): the script (5 steps) printed its first step only
    for run in ("ref", "test"):
        assert "step 1:" not in (clean.out / f"{run}.log").read_text()


@pytest.mark.parametrize("fault, direction, step, module", [
    ("silu:bias:0.5", "forward", 1, "model.layers.0.mlp.act_fn"),
    ("silu_backward:grad:3", "backward", 1, "model.layers.1.mlp.act_fn"),  # backward order: the last layer first
])
def test_a_fault_names_the_module_that_holds_the_op(clean, tmp_path: Path, fault: str, direction: str, step: int,
                                                    module: str) -> None:
    result = run_parity(W1_DROPOUT, steps=1, out=tmp_path, reference=clean.out / "ref",
                        env=_env(DROPLET_FAULTS=fault), fixed_input=direction == "forward")
    assert result.status == 1, result.lines
    first = result.comparison.first_divergence
    assert (first[direction]["step"], first[direction]["module"]) == (step, module)
    if direction == "backward":
        assert first["forward"] is None  # the gradients are wrong, the forward of step 1 is right
    else:  # fixed input: both layers' SiLU are wrong on their own (the fault hits every silu); the rest is clean,
        # the attention and the norms after the first SiLU included, and the dropout masks replay as they were
        comparison = result.comparison
        own = {(e.module, e.direction) for e in comparison.own_errors}
        assert {m for m, d in own if d == "fixed_forward"} == {"model.layers.0.mlp.act_fn",
                                                              "model.layers.1.mlp.act_fn"}
        assert comparison.fixed_input_failures == []
        later = [e for e in comparison.fixed_input if e.module.startswith("model.layers.1.self_attn")
                 or e.module == "model.norm"]
        assert later and all(e.verdict.value == "PASS" for e in later)
    assert f"first divergence ({direction}): step {step}, module '{module}'" in result.lines[0]


def test_a_failing_run_exits_2_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "environ", _env())
    status = parity_command.main(["--out", str(tmp_path), "--", str(SCRIPTS / "fails_on_cpu.py")])
    err = capsys.readouterr().err
    assert status == 2
    assert "the reference run (CPU) failed" in err
    assert "this script refuses to run on the CPU" in err
    assert not (tmp_path / "test.log").exists()  # the device run never started


def test_a_missing_script_exits_2(tmp_path: Path) -> None:
    result = run_parity(str(tmp_path / "nope.py"), out=tmp_path)
    assert result.status == 2 and "no such script" in result.lines[0]


def test_random_calls_on_the_device_draw_from_the_cpu_generator(tmp_path: Path) -> None:
    """Why parity needs OpRandomOnCPU: without it the device's dropout masks and random data differ from the
    CPU run's (the device's generator did not see the CPU's draws of model init)."""
    def draws(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        torch.randn(100)  # a CPU draw (model init) that the device's generator does not see
        x = torch.ones(4, 8, device=device)
        return [t.cpu() for t in (torch.rand(3, 4, device=device), torch.nn.functional.dropout(x, 0.5),
                                  torch.randint(0, 10, (5,), device=device), torch.empty(6, device=device).normal_(),
                                  torch.randperm(7, device=device))]

    ref = draws("cpu")
    with OpRandomOnCPU(device="dipu", results_dir=tmp_path):
        on_cpu = draws("dipu")
    plain = draws("dipu")
    assert all(torch.equal(a, b) for a, b in zip(ref, on_cpu, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(ref[:2], plain[:2], strict=True))
