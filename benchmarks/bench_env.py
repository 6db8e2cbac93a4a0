"""The ``env`` block every benchmark writes (DESIGN.md benchmark format)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path


def git_commit() -> str | None:
    """The checked-out commit, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def environment() -> dict:
    """Versions, machine, torch threads, commit and time of a benchmark run."""
    import torch

    import torch_dipu

    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    return {
        "torch": torch.__version__,
        "torch_dipu": torch_dipu.__version__,
        "dipu_vendor": torch_dipu.runtime().name,
        "transformers": tf_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "git_commit": git_commit(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
