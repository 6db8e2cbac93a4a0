"""Shared helpers for the torch_dipu / droplet tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_dipu
from torch_dipu.state import get_state
from torch_dipu.vendors import droplet

_DIPU_ENV_PREFIXES = ("DIPU_", "DROPLET_")


def run_python(code: str, env: dict[str, str] | None = None, cwd: str | Path | None = None,
               check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with a clean dipu/droplet environment plus ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(_DIPU_ENV_PREFIXES)}
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=cwd, capture_output=True, text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture(autouse=True)
def restore_dipu():
    """Every test leaves droplet's switches, the force-fallback list and the current device as it found them."""
    state = get_state()
    saved_fallback = list(state.config.force_fallback)
    saved_device = state.current_device
    with droplet.switches():
        yield
    torch_dipu.set_force_fallback(saved_fallback)
    state.current_device = saved_device


@pytest.fixture
def four_dipu_devices() -> int:
    """Four droplet devices for this test (droplet has one unless asked for more); ``restore_dipu`` puts the
    count back afterwards."""
    droplet.configure(device_count=4)
    return 4


@pytest.fixture(name="run_python")
def run_python_fixture():
    """:func:`run_python`: run code in a fresh interpreter (``run_python(code, env=None, cwd=None)``)."""
    return run_python


def cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu()
