"""``ditorch demo`` end to end (in a subprocess), the CLI's help, and best-device selection."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
import torch

from ditorch import cli, device

LOSS_LINE = re.compile(r"^step\s+(\d+)/(\d+)\s+loss\s+(\S+)$", re.MULTILINE)


def run_ditorch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ditorch", *args], capture_output=True, text=True, timeout=timeout)


def test_demo_trains_on_dipu():
    proc = run_ditorch("demo", "--steps", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    device_line = next(line for line in out.splitlines() if line.startswith("device:"))
    assert "dipu" in device_line
    steps = LOSS_LINE.findall(out)
    assert [(int(s), int(n)) for s, n, _ in steps] == [(1, 3), (2, 3), (3, 3)], out
    losses = [float(v) for _, _, v in steps]
    assert all(math.isfinite(v) for v in losses), losses
    assert losses[-1] < losses[0], f"loss did not decrease: {losses}"
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("done:") and "dipu" in summary and "3 steps" in summary, summary


def test_help():
    assert "demo" in run_ditorch("--help").stdout
    demo_help = run_ditorch("demo", "--help").stdout
    for option in ("--steps", "--device", "--seed"):
        assert option in demo_help


def test_cli_without_command_prints_help(capsys):
    assert cli.main([]) == 0
    assert "demo" in capsys.readouterr().out


def test_cli_parses_demo_options():
    args = cli.build_parser().parse_args(["demo", "--steps", "5", "--device", "cpu", "--seed", "7"])
    assert (args.command, args.steps, args.device, args.seed) == ("demo", 5, "cpu", 7)


# -- device selection ----------------------------------------------------------------------------------

def test_native_accelerator_wins(monkeypatch):
    monkeypatch.setattr(device, "native_accelerator", lambda: torch.device("cuda"))
    monkeypatch.setattr(device, "_load_dipu", lambda: pytest.fail("torch_dipu must not be loaded"))
    assert device.best_device() == torch.device("cuda")


def test_dipu_when_no_native_accelerator(monkeypatch):
    monkeypatch.setattr(device, "native_accelerator", lambda: None)
    assert device.best_device() == torch.device("dipu")


def test_cpu_when_nothing_else(monkeypatch):
    monkeypatch.setattr(device, "native_accelerator", lambda: None)
    monkeypatch.setattr(device, "_load_dipu", lambda: False)
    assert device.best_device() == torch.device("cpu")


def test_this_machine_picks_dipu():
    # torch here is a CPU build: the only accelerator is dipu (native, once torch_dipu is imported).
    assert device.best_device().type == "dipu"


@pytest.mark.parametrize("requested", ["cpu", "dipu", "dipu:1", torch.device("cpu")])
def test_explicit_request_wins(monkeypatch, requested):
    monkeypatch.setattr(device, "native_accelerator", lambda: torch.device("cuda"))
    assert device.best_device(requested) == torch.device(requested)


def test_dipu_request_without_torch_dipu(monkeypatch):
    monkeypatch.setattr(device, "_load_dipu", lambda: False)
    with pytest.raises(RuntimeError, match="torch_dipu"):
        device.best_device("dipu")


def test_native_accelerator_reports_torch_accelerator(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: None)
    assert device.native_accelerator() is None
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: torch.device("xpu"))
    assert device.native_accelerator() == torch.device("xpu")
