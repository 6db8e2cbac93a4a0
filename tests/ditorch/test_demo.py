"""``ditorch demo`` end to end (in a subprocess), the CLI's help, and best-device selection."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ditorch import cli, demo, device

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
    assert cli.main([]) == 2  # a usage error: the help on stdout, one line on stderr
    captured = capsys.readouterr()
    assert "demo" in captured.out
    assert captured.err == "ditorch: error: no command given (ditorch <command> --help)\n"


def test_cli_parses_demo_options():
    args = cli.build_parser().parse_args(["demo", "--steps", "5", "--device", "cpu", "--seed", "7"])
    assert (args.command, args.steps, args.device, args.seed) == ("demo", 5, "cpu", 7)
    assert (args.autocompare, args.fault, args.results_dir) == (False, None, None)
    args = cli.build_parser().parse_args(["demo", "--fault", "mm:bias:0.5", "--results-dir", "out", "--autocompare"])
    assert (args.autocompare, args.fault, args.results_dir) == (True, "mm:bias:0.5", "out")


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


# -- --autocompare and --fault (one step: OpAutoCompare makes the demo several times slower) ---------

def test_demo_fault_is_named_by_autocompare(tmp_path):
    proc = run_ditorch("demo", "--steps", "1", "--fault", "linear:bias:0.5", "--results-dir", str(tmp_path),
                       timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the tool found the fault: the rehearsal worked
    out = proc.stdout
    assert "fault: linear:bias:0.5" in out
    first = next(line for line in out.splitlines() if line.startswith("first FAIL:"))
    assert first.startswith("first FAIL: torch.nn.functional.linear forward "), first
    report = Path(next(line for line in out.splitlines() if line.startswith("report: ")).removeprefix("report: "))
    assert report.name == "report.html" and report.is_file() and tmp_path in report.parents, report
    assert re.search(r"^autocompare: \d+ checks: .*, [1-9]\d* FAIL; ", out, re.MULTILINE), out


def test_demo_autocompare_without_fault_finds_nothing(tmp_path):
    proc = run_ditorch("demo", "--steps", "1", "--autocompare", "--results-dir", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^autocompare: \d+ checks: [1-9]\d* PASS, .*, 0 FAIL; ", proc.stdout, re.MULTILINE), proc.stdout
    assert "first FAIL" not in proc.stdout
    assert list(tmp_path.glob("op_autocompare/*/rank0/report.html"))


@pytest.mark.parametrize("device_name, fault, message", [
    ("cpu", "mm:bias:0.5", "droplet, the simulated dipu device, but the demo runs on cpu"),
    ("dipu", "mm:oops", "--fault entry 'mm:oops' is malformed"),
])
def test_demo_fault_needs_a_valid_fault_on_droplet(device_name, fault, message, capsys):
    assert demo.run(steps=1, device=device_name, fault=fault) == demo.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_demo_without_faults_has_no_fault_line(monkeypatch, capsys):
    monkeypatch.setattr(demo, "train", lambda device, **kw: demo.DemoResult(device, [1.0], 0.1))
    assert demo.run(steps=1, device="dipu") == 0
    out = capsys.readouterr().out
    assert "fault:" not in out and "autocompare:" not in out
    assert out.strip().splitlines()[-1].startswith("done:")
