"""Run Python in a subprocess with a clean ditorch environment and chosen fake vendors on PYTHONPATH.

``import ditorch`` has side effects (it imports and activates a plugin), so every detection test runs in
a fresh process; fake vendor setups live in ``fake_vendors/<setup>/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FAKE_VENDORS = Path(__file__).parent / "fake_vendors"
#: Print what ``import ditorch`` chose, as JSON on the last stdout line.
PROBE = """
import json, os, sys
import torch
import ditorch
a = ditorch.adapter
print(json.dumps({
    "pid": os.getpid(),
    "adapter": a and a.name,
    "dist_backend": a and a.dist_backend,
    "failures": [list(f) for f in ditorch.failures],
    "privateuse1": torch._C._get_privateuse1_backend_name(),
    "mocked": ditorch.mocked,
    "transformers": "transformers" in sys.modules,
    "imported": sorted(m for m in ("torch_npu", "torch_mlu", "torch_dipu") if m in sys.modules),
}))
"""


def clean_env(*setups: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DITORCH_", "DIPU_", "DROPLET_")) and k != "PYTHONPATH"}
    if setups:
        env["PYTHONPATH"] = os.pathsep.join(str(FAKE_VENDORS / s) for s in setups)
    env.update(extra)
    return env


def run_python(*args: str, setups: tuple[str, ...] = (), **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=clean_env(*setups, **extra), capture_output=True, text=True,
                          timeout=180)
