"""The bad-input table's row type and how a row is judged (rows live in ``rows_*.py`` beside this file).

A row is a command run in a subprocess (``argv``; ``ditorch`` is the console script of the interpreter running
the tests, ``python`` that interpreter) in a folder holding a small CUDA-style ``train.py``, or an in-process
``call``. Either way the user's mistake must come back as one line matching ``expect``:

- a command exits with ``status``; its stderr holds no traceback; with status 2 (a user error) stderr holds
  exactly one line besides ditorch's device banner, and that line matches ``expect``; with another status
  (a warning while the run goes on) some line of stderr matches ``expect``;
- a call raises :class:`diopi.env.ConfigError` (a ``ValueError``) whose one-line message matches ``expect``.

``covers`` names the environment variables and ``ditorch`` subcommands a row exercises (a test checks that
every variable of docs/environment.md and every subcommand is covered by some row).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

TRAIN_SCRIPT = """\
import torch
model = torch.nn.Linear(8, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(16, 8).cuda()
    loss = torch.nn.functional.gelu(model(x)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print("loss", loss.item())
"""
#: ditorch's device banner (``ditorch: droplet (simulated accelerator) torch_dipu:0.1.0 pid: 123``).
BANNER = re.compile(r"^ditorch: .* pid: \d+$")
TIMEOUT_S = 240


@dataclass(frozen=True)
class Row:
    """One bad input and the one line it must produce."""

    id: str
    expect: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    call: Callable[[], object] | None = None
    status: int = 2
    covers: tuple[str, ...] = ()


def _resolve(argv: tuple[str, ...]) -> list[str]:
    bin_dir = Path(sys.executable).parent
    head = {"ditorch": str(bin_dir / "ditorch"), "python": sys.executable}.get(argv[0], argv[0])
    return [head, *argv[1:]]


def run_command(row: Row, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``row.argv`` in ``cwd`` with ``row.env`` added to a clean copy of the environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DIPU_", "DROPLET_", "OP_", "AUTOCOMPARE_", "DITORCH_", "DICP_", "DLINFER_",
                                "MODULE_DUMP_", "PYTEST_"))}
    env.update(row.env)
    return subprocess.run(_resolve(row.argv), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def judge_command(row: Row, proc: subprocess.CompletedProcess[str]) -> None:
    """Assert the command's exit status and its one-line message (see the module docstring)."""
    shown = f"{' '.join(row.argv)} (env {dict(row.env)})\nexit {proc.returncode}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, f"traceback instead of one line: {shown}"
    assert proc.returncode == row.status, f"expected exit status {row.status}: {shown}"
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not BANNER.match(line)]
    if row.status == 2:
        assert len(lines) == 1, f"expected exactly one line on stderr: {shown}"
    assert any(re.search(row.expect, line) for line in lines), f"no stderr line matches {row.expect!r}: {shown}"


def judge_call(row: Row) -> None:
    """Assert that ``row.call()`` raises ConfigError with a one-line message matching ``row.expect``."""
    from diopi.env import ConfigError

    assert row.call is not None
    try:
        row.call()
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message, f"{row.id}: message is not one line: {message!r}"
        assert re.search(row.expect, message), f"{row.id}: {message!r} does not match {row.expect!r}"
        return
    raise AssertionError(f"{row.id}: no ConfigError raised")
