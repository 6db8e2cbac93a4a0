"""Subprocesses for tests/vendors: the same interpreter (the plugin's environment), a clean environment.

``import ditorch`` changes torch for the whole process, so every check of ditorch on the plugin runs in a fresh
interpreter whose environment has none of the project's switches unless the test sets them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).parent / "scripts"
TIMEOUT = 300


def clean_env(**extra: str) -> dict[str, str]:
    prefixes = ("DITORCH_", "DIPU_", "DROPLET_", "OP_", "MODULE_DUMP_", "TORCH_DEVICE_BACKEND_AUTOLOAD")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k != "PYTHONPATH"}
    env.update(extra)
    return env


def python(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python args...`` in a fresh interpreter of this environment."""
    return subprocess.run([sys.executable, *args], env=clean_env(**env), capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)


def ditorch(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The ``ditorch`` command (``python -m ditorch args...``)."""
    return python("-m", "ditorch", *args, cwd=cwd, **env)


def run_code(code: str, **env: str) -> dict:
    """Run ``code`` (after ``import torch, ditorch``) and parse the JSON it prints on its last stdout line."""
    proc = python("-c", "import json, torch, ditorch\n" + code, DITORCH_QUIET="1", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
