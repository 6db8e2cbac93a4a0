"""Run a test script under torchrun with N processes, bounded: a hang kills the whole process group and fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

_CLEAN_PREFIXES = ("DIPU_", "DROPLET_", "OP_", "DICL_", "TORCHELASTIC_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                   "MASTER_")


def torchrun(script: str | Path, *args: str, nproc: int = 2, env: dict[str, str] | None = None,
             timeout: float = 240, prefix: tuple[str, ...] = (), cwd: str | Path | None = None,
             ) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc_per_node nproc [prefix...] script args``.

    The environment is the test's without dipu/droplet/op_tools/torchrun variables, plus ``env``; ``prefix`` are
    torchrun options before the script (``("-m", "ditorch")``, ``("--no-python",)``). On timeout every process of
    the launch is killed and ``AssertionError`` names the script.
    """
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEAN_PREFIXES)}
    full_env.update(env or {})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               *prefix, str(script), *args]
    proc = subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{script} {' '.join(args)} did not finish in {timeout} s:\n{out[-3000:]}\n"
                             f"{err[-3000:]}") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def result_line(proc: subprocess.CompletedProcess) -> object:
    """The JSON after the last ``RESULT `` in the launch's output (rank 0 prints it); AssertionError with the logs
    if there is none."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if lines:
        return json.loads(lines[-1][len("RESULT "):])
    raise AssertionError(f"no RESULT line (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
