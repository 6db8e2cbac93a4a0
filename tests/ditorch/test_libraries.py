"""Library parity (issue 13): the same short transformers / accelerate / peft runs on the plain CPU and under
``import ditorch`` ("cuda" code on the vendor's device), compared.

The runs live in ``library_runs/run_scenarios.py``, a CUDA-written script: ``--mode ditorch`` only adds
``import ditorch`` after ``import torch``. Each side runs once per test session in its own subprocess
(``import ditorch`` changes the whole process); its ``results.json`` and tensors are shared by the pytest-xdist
workers through a file lock (the xdist pattern: ``tmp_path_factory.getbasetemp().parent``). With two workers
each starts one side, so the two sides run at the same time. Each test below compares one scenario.

Comparison rules:
- float32: losses within float32 noise (rtol 1e-5); final parameters within rtol/atol 1e-4 (six AdamW steps
  turn float32 rounding of near-zero gradients into small, bounded parameter differences).
- bf16/fp16, the noise-floor rule: the device run's distance to the CPU's float32 run may be at most
  ``NOISE_FACTOR`` times the distance of the CPU's own reduced-precision run to that float32 run, plus a tiny
  slack. The CPU cannot run Trainer's fp16 (accelerate turns autocast off on the CPU, so ``fp16=True`` trains
  in float32 there: ``native_amp`` is False); for fp16 the floor is the CPU's bf16 run instead, which is the
  looser of the two (bf16 keeps 3 fewer mantissa bits than fp16).
- resume: on each side, the run resumed from the step-3 checkpoint ends exactly where the uninterrupted run
  ends (same losses for the resumed steps, same final parameters).
- generate: greedy and sampled tokens equal the CPU's. The device's random stream equals the CPU's for the
  same seed (droplet's random kernels draw from a host generator seeded like the CPU's), so sampled tokens
  are compared exactly, and two sampled runs from one seed must agree on each side.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer needs it too
torch = pytest.importorskip("torch")
from safetensors.torch import load_file  # noqa: E402
from vendor_env import clean_env  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "library_runs" / "run_scenarios.py"
SIDES = ("cpu", "ditorch")
TIMEOUT = 420
FP32 = dict(rtol=1e-5, atol=1e-6)  # losses
FP32_PARAMS = dict(rtol=1e-4, atol=1e-4)  # parameters after six AdamW steps
NOISE_FACTOR, NOISE_SLACK = 2.0, 1e-4
EXACT = dict(rtol=0.0, atol=0.0)


# ----------------------------------------------------------------------------------------------- running the sides
def run_side(mode: str, out: Path, scenarios: str = "", **extra_env: str) -> dict:
    """Run the scenario script for one side (all scenarios, or the comma-separated ``scenarios``); its
    results.json, or what went wrong."""
    out.mkdir(parents=True, exist_ok=True)
    env = clean_env(DITORCH_QUIET="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                    HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", **extra_env)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    command = [sys.executable, str(SCRIPT), "--mode", mode, "--out", str(out)]
    if scenarios:
        command += ["--scenarios", scenarios]
    try:
        proc = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=TIMEOUT)
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        returncode, output = None, f"timed out after {TIMEOUT}s\n{e.stdout or ''}{e.stderr or ''}"
    results = out / "results.json"
    data = json.loads(results.read_text()) if results.is_file() else {"scenarios": {}}
    data.update(dir=str(out), returncode=returncode, output_tail=output[-3000:])
    return data


def shared_side(root: Path, mode: str) -> dict:
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    done = root / f"{mode}.json"
    with FileLock(str(root / f"{mode}.lock")):
        if not done.is_file():
            done.write_text(json.dumps(run_side(mode, root / mode)))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def sides(tmp_path_factory) -> dict[str, dict]:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        root = tmp_path_factory.getbasetemp() / "library_runs"
        return {mode: shared_side(root, mode) for mode in SIDES}
    root = tmp_path_factory.getbasetemp().parent / "library_runs"
    order = SIDES if int(worker.removeprefix("gw") or 0) % 2 == 0 else SIDES[::-1]  # two workers, two sides
    return {mode: shared_side(root, mode) for mode in order}


def scenario(sides: dict[str, dict], name: str) -> tuple[dict, dict]:
    """The (cpu, ditorch) results of one scenario; a failed run fails the test with its traceback."""
    found = {}
    for mode in SIDES:
        data = sides[mode]
        result = data["scenarios"].get(name)
        if result is None:
            pytest.fail(f"{mode} run has no result for {name!r} (exit status {data['returncode']}):\n"
                        f"{data['output_tail']}")
        if "error" in result:
            pytest.fail(f"{name} raised on the {mode} side: {result['error']}\n{result['traceback']}")
        found[mode] = result
    return found["cpu"], found["ditorch"]


def tensors(sides: dict[str, dict], mode: str, result: dict) -> dict[str, torch.Tensor]:
    return load_file(str(Path(sides[mode]["dir"]) / result["tensors"]))


def group(tensors_: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k.split("/", 1)[1]: v for k, v in tensors_.items() if k.startswith(prefix + "/")}


def check_devices(sides: dict[str, dict], cpu: dict, dev: dict, *keys: str) -> None:
    """The CPU side ran on the CPU; the ditorch side on the vendor's device (what "cuda" means there)."""
    vendor = sides["ditorch"]["device_type"]
    assert vendor != "cpu", f"under ditorch 'cuda' is the CPU: no vendor device was activated ({sides['ditorch']})"
    for key in keys or ("param_device",):
        assert cpu[key] == "cpu", f"cpu side: {key} = {cpu[key]}"
        assert dev[key] == vendor, f"ditorch side: {key} = {dev[key]}, expected the vendor's device {vendor!r}"


def assert_losses(cpu: list[float], dev: list[float], what: str, **tol: float) -> None:
    assert len(cpu) == len(dev), f"{what}: {len(cpu)} losses on the cpu, {len(dev)} under ditorch"
    torch.testing.assert_close(torch.tensor(dev, dtype=torch.float64), torch.tensor(cpu, dtype=torch.float64),
                               **(tol or FP32), msg=lambda m: f"{what}: ditorch {dev} vs cpu {cpu}\n{m}")


def assert_tensors(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor], what: str,
                   **tol: float) -> None:
    assert expected.keys() == actual.keys(), f"{what}: different tensors {sorted(expected ^ actual)}"
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], **(tol or FP32_PARAMS),
                                   msg=lambda m, key=key: f"{what}, {key}:\n{m}")


def distance(a: list[float] | dict[str, torch.Tensor], b: list[float] | dict[str, torch.Tensor]) -> float:
    """Max absolute difference of two loss curves, or the L2 norm of the difference of two parameter sets."""
    if isinstance(a, dict):
        return math.sqrt(sum((a[k].double() - b[k].double()).pow(2).sum().item() for k in a))
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def fp32_parity(sides: dict[str, dict], name: str) -> tuple[dict, dict]:
    cpu, dev = scenario(sides, name)
    check_devices(sides, cpu, dev)
    assert dev["n_gpu"] == 1 and dev["wrapped"] == cpu["wrapped"], (
        f"Trainer under ditorch: n_gpu={dev['n_gpu']}, model wrapped in {dev['wrapped']} "
        f"(cpu: {cpu['wrapped']}); one process on one machine trains on one device")
    assert cpu["global_step"] == dev["global_step"]
    assert_losses(cpu["losses"], dev["losses"], f"{name} losses")
    assert_tensors(group(tensors(sides, "cpu", cpu), "params"), group(tensors(sides, "ditorch", dev), "params"),
                   f"{name} final parameters")
    return cpu, dev


# ----------------------------------------------------------------------------------------------- Trainer
def test_trainer_fp32(sides):
    fp32_parity(sides, "trainer_fp32")


def test_parity_catches_a_device_whose_matmul_is_slightly_wrong(sides, tmp_path):
    """The comparison can fail: droplet adds 1e-3 to every mm result, and Trainer's fp32 run must be told apart."""
    faulty = run_side("ditorch", tmp_path / "faulty", scenarios="trainer_fp32", DROPLET_FAULTS="mm:bias:0.001")
    assert "error" not in faulty["scenarios"].get("trainer_fp32", {"error": faulty["output_tail"]})
    with pytest.raises(AssertionError, match="trainer_fp32"):
        fp32_parity({**sides, "ditorch": faulty}, "trainer_fp32")


def test_trainer_gradient_accumulation(sides):
    cpu, dev = fp32_parity(sides, "trainer_grad_accum")
    assert dev["global_step"] == 6


def test_trainer_gradient_checkpointing(sides):
    fp32_parity(sides, "trainer_grad_ckpt")


def test_trainer_user_optimizer(sides):
    cpu, _ = fp32_parity(sides, "trainer_user_optimizer")
    default, _ = scenario(sides, "trainer_fp32")
    assert cpu["losses"] != default["losses"], "the user's optimizer and scheduler were not used"


def noise_floor_check(sides: dict[str, dict], name: str, floor_name: str) -> None:
    """The device's reduced-precision run is no farther from the CPU's float32 run than NOISE_FACTOR times
    the CPU's own reduced-precision run (``floor_name``), plus NOISE_SLACK: for the losses and the parameters."""
    cpu, dev = scenario(sides, name)
    check_devices(sides, cpu, dev)
    reference, _ = scenario(sides, "trainer_fp32")
    floor, _ = scenario(sides, floor_name)
    params = {r["tensors"]: group(tensors(sides, "cpu", r), "params") for r in (reference, floor)}
    dev_params = group(tensors(sides, "ditorch", dev), "params")
    for what, ref_value, floor_value, dev_value in (
        ("losses", reference["losses"], floor["losses"], dev["losses"]),
        ("parameters (L2)", params[reference["tensors"]], params[floor["tensors"]], dev_params),
    ):
        allowed = NOISE_FACTOR * distance(floor_value, ref_value) + NOISE_SLACK
        measured = distance(dev_value, ref_value)
        assert measured <= allowed, (
            f"{name} {what}: the device run is {measured:.3g} from the cpu float32 run; allowed "
            f"{NOISE_FACTOR} x {distance(floor_value, ref_value):.3g} (the cpu's own {floor_name} run) "
            f"+ {NOISE_SLACK} = {allowed:.3g}")


def test_trainer_bf16(sides):
    cpu, dev = scenario(sides, "trainer_bf16")
    assert dev["mixed_precision"] == "bf16" and dev["native_amp"], dev
    noise_floor_check(sides, "trainer_bf16", "trainer_bf16")


def test_trainer_fp16(sides):
    cpu, dev = scenario(sides, "trainer_fp16")
    # As on CUDA: autocast in float16 with a gradient scaler.
    assert dev["mixed_precision"] == "fp16" and dev["native_amp"] and dev["grad_scaler"], dev
    # The CPU trains fp16=True in float32 (no native amp there): its bf16 run gives the floor.
    noise_floor_check(sides, "trainer_fp16", "trainer_fp16" if cpu["native_amp"] else "trainer_bf16")


def check_resume(sides: dict[str, dict], mode: str, result: dict, resumed_from: int = 3) -> None:
    """On one side: the resumed run's steps after the checkpoint and final parameters equal the full run's."""
    resumed = result["resumed"]
    steps = dict(zip(result.get("steps", range(1, len(result["losses"]) + 1)), result["losses"], strict=True))
    if "steps" in resumed:  # Trainer: log history of the resumed run (restored history + new steps)
        after = {s: loss for s, loss in zip(resumed["steps"], resumed["losses"], strict=True) if s > resumed_from}
    else:  # accelerate: the losses of the steps run after load_state
        after = {resumed_from + 1 + i: loss for i, loss in enumerate(resumed["losses"])}
    assert after, f"{mode}: the resumed run trained no step"
    assert_losses([steps[s] for s in after], list(after.values()),
                  f"{mode}: losses of steps {list(after)} resumed from the checkpoint vs uninterrupted", **EXACT)
    saved = tensors(sides, mode, result)
    assert_tensors(group(saved, "params"), group(saved, "resumed"),
                   f"{mode}: final parameters, resumed vs uninterrupted", rtol=1e-6, atol=1e-7)


def test_trainer_checkpoint_resume(sides):
    cpu, dev = fp32_parity(sides, "trainer_resume")
    assert {"model.safetensors", "optimizer.pt", "rng_state.pth"} <= set(dev["checkpoint_files"]), dev
    for mode, result in (("cpu", cpu), ("ditorch", dev)):
        check_resume(sides, mode, result)


# ----------------------------------------------------------------------------------------------- accelerate
def test_accelerate_prepare_loop_and_state(sides):
    cpu, dev = scenario(sides, "accelerate")
    check_devices(sides, cpu, dev, "param_device", "batch_device")
    assert_losses(cpu["losses"], dev["losses"], "accelerate losses")
    assert_tensors(group(tensors(sides, "cpu", cpu), "params"), group(tensors(sides, "ditorch", dev), "params"),
                   "accelerate final parameters")
    for mode, result in (("cpu", cpu), ("ditorch", dev)):
        check_resume(sides, mode, result)


# ----------------------------------------------------------------------------------------------- peft
def test_peft_lora_train_save_reload_merge(sides):
    pytest.importorskip("peft")
    cpu, dev = scenario(sides, "peft_lora")
    check_devices(sides, cpu, dev, "param_device", "reloaded_param_device")
    assert_losses(cpu["losses"], dev["losses"], "LoRA training losses")
    for mode, result in (("cpu", cpu), ("ditorch", dev)):
        assert "adapter_model.safetensors" in result["adapter_files"], result
        assert result["adapter_vs_base"] > 1e-4, f"{mode}: the trained adapter does not change the outputs: {result}"
        assert result["reloaded_vs_trained"] <= 1e-6, f"{mode}: reloaded adapter differs: {result}"
        assert result["merged_vs_reloaded"] <= 1e-5, f"{mode}: merged model differs from the adapter: {result}"
    assert_tensors(group(tensors(sides, "cpu", cpu), "logits"), group(tensors(sides, "ditorch", dev), "logits"),
                   "LoRA logits (trained, reloaded, merged)", rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------------- from_pretrained
def test_from_pretrained_safetensors(sides):
    cpu, dev = scenario(sides, "from_pretrained")
    check_devices(sides, cpu, dev, "param_device", "device_map_param_device")
    assert "model.safetensors" in dev["files"], dev
    for mode, result in (("cpu", cpu), ("ditorch", dev)):
        for key in ("reloaded_vs_original", "cpu_kept_vs_original", "device_map_vs_original"):
            assert result[key] <= 1e-5, f"{mode}: logits {key.replace('_vs_', ' vs ')} differ by {result[key]}"
    assert_tensors(group(tensors(sides, "cpu", cpu), "logits"), group(tensors(sides, "ditorch", dev), "logits"),
                   "from_pretrained logits", rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------------- generate
def test_generate_greedy_and_sampled_left_padded(sides):
    cpu, dev = scenario(sides, "generate")
    check_devices(sides, cpu, dev, "param_device", "output_device")
    assert dev["greedy"] == cpu["greedy"], (
        f"greedy tokens differ (smallest top-1/top-2 logit margin on the cpu: {cpu['greedy_min_margin']:.3g}):\n"
        f"cpu     {cpu['greedy']}\nditorch {dev['greedy']}")
    for mode, result in (("cpu", cpu), ("ditorch", dev)):
        assert result["sampled"] == result["sampled_again"], f"{mode}: sampling twice from one seed differs"
        assert all(0 <= t < 128 for row in result["sampled"] for t in row)
    assert dev["sampled"] == cpu["sampled"], (
        f"sampled tokens from the same seed differ:\ncpu     {cpu['sampled']}\nditorch {dev['sampled']}")


# ----------------------------------------------------------------------------------------------- pipeline
def test_text_generation_pipeline_device_0(sides):
    cpu, dev = scenario(sides, "pipeline")
    check_devices(sides, cpu, dev)
    assert dev["texts"] == cpu["texts"], f"generated texts differ:\ncpu     {cpu['texts']}\nditorch {dev['texts']}"
