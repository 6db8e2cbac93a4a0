"""``ditorch parity`` on a nanoGPT-style script (scripts/nanogpt/: written here in nanoGPT's manner) that keeps
nanoGPT's CUDA-only idioms: module-level ``torch.cuda.is_bf16_supported()`` choosing the dtype, autocast with a
GradScaler, fused AdamW on cuda, a tied LM head, pinned batches moved with ``non_blocking=True``, an evaluation
before the first step, gradient accumulation and checkpoint saving."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
import torch

from module_tools import ModuleDump, load_dump
from module_tools.compare import compare_runs
from module_tools.parity import run_parity

NANOGPT = Path(__file__).parent / "scripts" / "nanogpt"
TRAIN = str(NANOGPT / "train.py")
#: the first training call of the model in step 1: calls 0-3 are estimate_loss's (2 splits x eval_iters=2)
FIRST_TRAIN_CALL = 4


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without dipu/droplet/op_tools/dump/ditorch switches, plus ``extra``."""
    prefixes = ("DIPU_", "DROPLET_", "OP_", "MODULE_DUMP_", "DITORCH_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(prefixes)}, **extra}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory):
    """The clean parity run (both runs, 2 steps, an evaluation before each step, a checkpoint after the first)."""
    out = tmp_path_factory.mktemp("nanogpt")
    args = ["--eval_interval=1", "--save_checkpoint=True", "--always_save_checkpoint=True",
            f"--out_dir={out / 'ckpt'}"]
    return run_parity(TRAIN, args, out=out / "parity", env=_env())


def _losses(log: str) -> list[float]:
    """The losses the script printed: ``step N: train loss A, val loss B`` and ``iter N: loss C``."""
    return [float(x) for x in re.findall(r"loss (\d+\.\d+)", log)]


def test_clean_run_has_no_divergence_and_both_runs_trained(clean) -> None:
    assert clean.status == 0, clean.lines
    assert clean.lines[0] == "no divergence in 2 steps"
    assert clean.comparison.steps == [1, 2]
    assert not clean.comparison.alignment.unaligned_ref and not clean.comparison.alignment.unaligned_test
    logs = {run: (clean.out / f"{run}.log").read_text() for run in ("ref", "test")}
    for run, log in logs.items():
        # the module-level torch.cuda queries chose bfloat16 on both sides (the reference run answers them as
        # droplet does); the cuda path was taken (fused AdamW, pinned batches); evaluations, step 0's log line, the
        # checkpoint
        assert "dtype bfloat16" in log and "using fused AdamW: True" in log, (run, log)
        assert "step 0: train loss" in log and "iter 0: loss" in log and "step 1: train loss" in log, (run, log)
        assert "saving checkpoint" in log, (run, log)
        assert "iter 1: loss" not in log  # ended at the 2nd optimizer.step()
    assert "answers as the device does: torch.cuda.is_bf16_supported() = True" in logs["ref"]
    ref, test = _losses(logs["ref"]), _losses(logs["test"])
    assert len(ref) == len(test) == 5 and all(3.0 < x < 5.0 for x in ref)  # ln(64) = 4.16 at the start
    assert ref == pytest.approx(test, abs=2e-2)
    assert re.search(r"OpRandomOnCPU: [1-9]\d* calls ran on the CPU", logs["test"])  # the dropouts
    # autocast was on in both runs: the LM head computed in bfloat16
    for run in ("ref", "test"):
        dump = load_dump(clean.out / run)
        head = next(e for e in dump.forward if e["module"] == "lm_head")
        assert head["tensors"]["output.0"]["dtype"] == "bfloat16"
        assert head["tensors"]["param.weight"]["dtype"] == "float32"
    checkpoint = torch.load(clean.out.parent / "ckpt" / "ckpt.pt", map_location="cpu", weights_only=False)
    assert checkpoint["iter_num"] == 1 and "lm_head.weight" in checkpoint["model"]


def test_a_device_without_bfloat16_gets_float16_on_both_sides(tmp_path: Path) -> None:
    """The reference run answers ``torch.cuda.is_bf16_supported()`` as the device does (the CPU's autocast takes
    bfloat16; this device does not): both runs choose float16 and a GradScaler, and agree."""
    result = run_parity(TRAIN, steps=1, out=tmp_path, env=_env(DROPLET_UNSUPPORTED_DTYPES="bfloat16"))
    assert result.status == 0, result.lines
    logs = {run: (tmp_path / f"{run}.log").read_text() for run in ("ref", "test")}
    assert "the reference run answers as the device does: torch.cuda.is_bf16_supported() = False" in logs["ref"]
    for run, log in logs.items():
        assert "dtype float16" in log and "iter 0: loss" not in log, (run, log)  # ended at the 1st step
        dump = load_dump(tmp_path / run)
        head = next(e for e in dump.forward if e["module"] == "lm_head")
        assert head["tensors"]["output.0"]["dtype"] == "float16"
        # the loss's gradient is the scaler's scale over the 2 micro-steps: the scaler is on in both runs
        root = next(e for e in dump.backward if e["module"] == "")
        assert root["tensors"]["grad_output.1"]["max"] == 2.0 ** 16 / 2


@pytest.mark.parametrize("fault, direction, module", [
    ("gelu:bias:0.5", "forward", "transformer.h.0.mlp.gelu"),
    ("native_layer_norm:bias:0.5", "forward", "transformer.h.0.ln_1"),
    ("gelu_backward:grad:3", "backward", "transformer.h.1.mlp.gelu"),  # backward order: the last layer first
])
def test_a_fault_names_the_module_that_holds_the_op(clean, tmp_path: Path, fault: str, direction: str,
                                                    module: str) -> None:
    fixed = fault.startswith("gelu:")
    result = run_parity(TRAIN, steps=1, out=tmp_path, reference=clean.out / "ref", env=_env(DROPLET_FAULTS=fault),
                        fixed_input=fixed)
    assert result.status == 1, result.lines
    first = result.comparison.first_divergence
    # forward: the first call of the module (an estimate_loss call); backward: the first training call's
    call = 0 if direction == "forward" else FIRST_TRAIN_CALL
    assert (first[direction]["step"], first[direction]["module"], first[direction]["call"]) == (1, module, call)
    assert f"first divergence ({direction}): step 1, module '{module}'" in result.lines[0]
    if direction == "backward":
        assert first["forward"] is None  # the gradients are wrong, the forward of step 1 is right
    if fixed:  # each GELU is wrong on its own, every other module is clean on its own
        own = {e.module for e in result.comparison.own_errors if e.direction == "fixed_forward"}
        assert own == {"transformer.h.0.mlp.gelu", "transformer.h.1.mlp.gelu"}
        assert result.comparison.fixed_input_failures == []


def test_a_compiled_model_is_dumped_whole(tmp_path: Path) -> None:
    """nanoGPT compiles its model by default: the dump's hooks run eagerly inside the compiled model (graph
    breaks), so the dump of ``torch.compile(model)`` holds every call, equal to the uncompiled model's."""
    spec = importlib.util.spec_from_file_location("nanogpt_model_under_test", NANOGPT / "model.py")
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)

    def run(compiled: bool, out: Path) -> None:
        torch.manual_seed(0)
        model = gpt.GPT(gpt.GPTConfig(dropout=0.0))
        optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        if compiled:
            model = torch.compile(model, backend="eager")
        x = torch.randint(0, 64, (2, 16))
        with ModuleDump(model, out):
            for _ in range(2):
                _, loss = model(x, x)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    run(False, tmp_path / "eager")
    try:
        run(True, tmp_path / "compiled")
    finally:
        torch._dynamo.reset()  # no compiled code left for the worker's later tests
    eager, compiled = load_dump(tmp_path / "eager"), load_dump(tmp_path / "compiled")
    assert compiled.root == "OptimizedModule"

    def keys(entries: list[dict], prefix: str = "") -> set[tuple]:
        """(module path, step, call) of each entry under ``prefix`` (the compiled model's ``_orig_mod``)."""
        return {(e["module"].removeprefix(prefix).lstrip("."), e["step"], e["call"]) for e in entries
                if e["module"].startswith(prefix)}

    assert keys(compiled.forward, "_orig_mod") == keys(eager.forward)
    assert keys(compiled.backward, "_orig_mod") == keys(eager.backward)
    called = [path for path, cls in eager.modules.items() if cls not in ("ModuleDict", "ModuleList")]
    assert len(keys(eager.forward)) == 2 * len(called) == 60  # every module but the containers, once a step
    result = compare_runs(eager, compiled)
    assert not result.diverged, result.summary()
