"""Acceptance: CUDA-style scripts (tests/ditorch/cuda_scripts/, no vendor named anywhere) run unchanged on
the vendor's device, both under ``ditorch run -- script.py`` and after ``import torch, ditorch``.

Each script runs in its own subprocess; the test checks the values it prints. On this machine the
vendor is torch_dipu (the simulated droplet device), so the device printed must be ``dipu``.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dist_launch import torchrun  # tests/dist_launch.py (tests/ is on sys.path through its conftest)

SCRIPTS = Path(__file__).resolve().parent / "cuda_scripts"
VENDOR_DEVICE = "dipu"
TIMEOUT = 180


def ditorch_run_command(script: Path, *args: str) -> list[str]:
    """``ditorch run -- script args`` with the installed console script (``python -m ditorch`` without it)."""
    console = shutil.which("ditorch", path=str(Path(sys.executable).parent))
    launcher = [console] if console else [sys.executable, "-m", "ditorch"]
    return [*launcher, "run", "--", str(script), *args]


def import_ditorch_command(script: Path, *args: str) -> list[str]:
    """``import torch, ditorch`` first, then the script as ``__main__`` (the two-line switch)."""
    code = f"import torch, ditorch; import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    return [sys.executable, "-c", code, *args]


LAUNCHERS = {"ditorch run": ditorch_run_command, "import ditorch": import_ditorch_command}


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DITORCH_", "DROPLET_FAULTS"))}
    return {**env, "DITORCH_QUIET": "1", **extra}


def values(stdout: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"^([a-z0-9_ ]+): (.*)$", stdout, re.MULTILINE))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_training_loop_with_amp_events_and_memory(launcher):
    command = LAUNCHERS[launcher](SCRIPTS / "train_amp.py", "--steps", "15")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=environment())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = values(proc.stdout)
    assert out["device"].split(":")[0] == VENDOR_DEVICE, proc.stdout
    assert out["is_cuda"] == "True"
    assert out["autocast dtype"] == "torch.bfloat16"
    first, final = float(out["first loss"]), float(out["final loss"])
    assert final < first * 0.5, f"loss did not decrease: {first} -> {final}"
    assert float(out["elapsed ms"]) > 0
    assert int(out["memory allocated"]) > 0
    assert int(out["max memory allocated"]) >= int(out["memory allocated"])
    assert int(out["device count"]) >= 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_process_nccl_all_reduce(launcher):
    port, world_size = free_port(), 2
    procs = []
    for rank in range(world_size):
        if launcher == "ditorch run":  # rank, world size and port on the command line
            command = LAUNCHERS[launcher](SCRIPTS / "allreduce_nccl.py", str(rank), str(world_size), str(port))
            env = environment()
        else:  # ... or in the environment, as torchrun passes them
            command = LAUNCHERS[launcher](SCRIPTS / "allreduce_nccl.py")
            env = environment(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_PORT=str(port))
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outputs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
            outputs.append((proc.returncode, stdout, stderr))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, (code, stdout, stderr) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed:\n{stdout}\n{stderr}"
        out = values(stdout)
        assert out[f"rank {rank} all_reduce"] == "[3.0, 30.0]", stdout
        assert out[f"rank {rank} device"].split(":")[0] == VENDOR_DEVICE, stdout


@pytest.mark.parametrize(("launcher", "setup"), [("ditorch run", "accelerator"), ("import ditorch", "cuda")])
def test_ddp_with_torchrun(launcher, setup):
    """pytorch/examples' DDP idiom (device from torch.accelerator, backend from get_default_backend_for_device,
    DistributedSampler) and the CUDA idiom (nccl, DistributedDataParallel(model.cuda())) on 2 processes."""
    script = SCRIPTS / "ddp_torchrun.py"
    if launcher == "ditorch run":  # each worker: python -m ditorch script args
        prefix, command = ("-m", "ditorch"), [str(script)]
    else:
        prefix, command = ("--no-python",), import_ditorch_command(script)
    proc = torchrun(*command, "--setup", setup, nproc=2, prefix=prefix, timeout=TIMEOUT,
                    env={"DITORCH_DISABLE_MOCK": "0", "DITORCH_QUIET": "1"})
    stdout, stderr = proc.stdout, proc.stderr
    assert proc.returncode == 0, stdout + stderr
    out = values(stdout)
    for rank in range(2):
        assert out[f"rank {rank} backend"] == out[f"rank {rank} default backend"] == "dicl", stdout
        assert out[f"rank {rank} device"].split(":")[0] == VENDOR_DEVICE, stdout
        assert out[f"rank {rank} steps"] == "24", stdout  # 128 samples / 2 ranks / batch 8, 3 epochs
        assert float(out[f"rank {rank} last epoch loss"]) < 0.5 * float(out[f"rank {rank} first epoch loss"]), stdout
    assert out["rank 0 checksum"] == out["rank 1 checksum"], stdout  # DDP kept the replicas equal
