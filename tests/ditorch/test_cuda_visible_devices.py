"""``CUDA_VISIBLE_DEVICES`` under ``import ditorch``: passed on to the vendor plugin's own variable
(``DIPU_VISIBLE_DEVICES`` for dipu), the vendor's variable winning, hiding every device meaning the CPU with
the reason shown, and a device that does not exist being one error naming the variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from vendor_env import clean_env

from ditorch.adapters import builtin
from ditorch.config import DitorchConfig
from ditorch.detect import pass_visible_devices

#: What ``import ditorch`` chose and what torch.cuda says, as JSON on the last stdout line; a child process
#: reports the selection it inherits.
PROBE = """
import json, os, subprocess, sys
import torch
import ditorch
count = torch.cuda.device_count()
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('DIPU_VISIBLE_DEVICES'))"],
                       capture_output=True, text=True).stdout.strip()
print(json.dumps({
    "adapter": ditorch.adapter and ditorch.adapter.name,
    "available": torch.cuda.is_available(),
    "count": count,
    "bus_ids": [torch.dipu.get_device_properties(i).pci_bus_id for i in range(count)] if "torch_dipu" in sys.modules
               and ditorch.adapter else [],  # droplet's own index of cuda:i
    "dipu_visible": os.environ.get("DIPU_VISIBLE_DEVICES"),
    "ascend_visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
    "child": child,
    "status": ditorch.detection.status.get("dipu"),
}))
"""


def run(code: str, *args: str, setups: tuple[str, ...] = (), **env: str | None) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter; ``env`` values of None remove the variable (``CUDA_VISIBLE_DEVICES``
    is unset unless given)."""
    full = clean_env(*setups)
    full.pop("CUDA_VISIBLE_DEVICES", None)
    for name, value in env.items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return subprocess.run([sys.executable, "-c", code, *args], env=full, capture_output=True, text=True, timeout=180)


def probe(setups: tuple[str, ...] = (), **env: str) -> tuple[dict, list[str]]:
    proc = run(PROBE, setups=setups, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr.splitlines()


def warnings(stderr: list[str]) -> list[str]:
    return [line for line in stderr if line.startswith("ditorch: warning:")]


def test_one_device_by_default():
    got, stderr = probe()
    assert (got["adapter"], got["count"], got["dipu_visible"]) == ("dipu", 1, None)
    assert warnings(stderr) == []


def test_cuda_visible_devices_selects_the_vendors_devices():
    got, stderr = probe(DROPLET_DEVICE_COUNT="4", CUDA_VISIBLE_DEVICES="1")
    assert (got["adapter"], got["available"], got["count"], got["bus_ids"]) == ("dipu", True, 1, [1])
    assert got["dipu_visible"] == got["child"] == "1"  # the plugin and child processes see the selection
    got, _ = probe(DROPLET_DEVICE_COUNT="4", CUDA_VISIBLE_DEVICES="3,1")
    assert (got["count"], got["bus_ids"]) == (2, [3, 1])  # renumbered in the given order
    got, stderr = probe(CUDA_VISIBLE_DEVICES="0")
    assert (got["adapter"], got["count"]) == ("dipu", 1) and warnings(stderr) == []


def test_the_vendors_variable_wins_with_one_warning():
    got, stderr = probe(DROPLET_DEVICE_COUNT="4", CUDA_VISIBLE_DEVICES="1,3", DIPU_VISIBLE_DEVICES="2")
    assert (got["count"], got["bus_ids"], got["dipu_visible"]) == (1, [2], "2")
    assert warnings(stderr) == [
        "ditorch: warning: DIPU_VISIBLE_DEVICES='2' wins over CUDA_VISIBLE_DEVICES='1,3' for torch_dipu"]
    _, stderr = probe(DROPLET_DEVICE_COUNT="4", CUDA_VISIBLE_DEVICES="2", DIPU_VISIBLE_DEVICES="2")
    assert warnings(stderr) == []  # the same selection: nothing to say


@pytest.mark.parametrize("value", ["", "-1"])
def test_hiding_every_device_means_the_cpu_and_says_why(value: str):
    got, stderr = probe(CUDA_VISIBLE_DEVICES=value)
    assert (got["adapter"], got["available"], got["count"], got["dipu_visible"]) == (None, False, 0, value)
    reason = f"CUDA_VISIBLE_DEVICES={value!r} (passed to torch_dipu as DIPU_VISIBLE_DEVICES) hides every dipu device"
    assert got["status"] == f"no device: {reason}"
    assert warnings(stderr) == [f"ditorch: warning: {reason}; ditorch runs on the CPU"]
    assert stderr[-1].startswith("ditorch: cpu torch:")
    info = run("import sys; from ditorch import cli; sys.exit(cli.main(['info']))", CUDA_VISIBLE_DEVICES=value,
               DITORCH_QUIET="1")
    assert info.returncode == 0, info.stderr
    assert f"dipu   torch_dipu   90  no device: {reason}" in info.stdout, info.stdout


def test_hiding_every_device_of_a_named_vendor_is_an_error():
    proc = run("import ditorch", CUDA_VISIBLE_DEVICES="", DITORCH_VENDOR="dipu")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "ditorch.detect.DetectionError: DITORCH_VENDOR=dipu: torch_dipu imported but reports no usable dipu device: "
        "CUDA_VISIBLE_DEVICES='' (passed to torch_dipu as DIPU_VISIBLE_DEVICES) hides every dipu device")


@pytest.mark.parametrize("vendor", [None, "dipu"])
@pytest.mark.parametrize(("value", "problem"), [
    ("7", "device 7 does not exist (droplet has 1 device: 0)"),
    ("0,x", "'x' is not a device index"),
])
def test_a_device_that_does_not_exist_is_one_error_naming_cuda_visible_devices(vendor, value, problem):
    proc = run("import ditorch", CUDA_VISIBLE_DEVICES=value, DITORCH_VENDOR=vendor)
    assert proc.returncode != 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    prefix = "ditorch.detect.DetectionError: " + (f"DITORCH_VENDOR={vendor}: " if vendor else "")
    assert last.startswith(f"{prefix}CUDA_VISIBLE_DEVICES={value!r} (passed to torch_dipu as DIPU_VISIBLE_DEVICES): "
                           f"{problem}"), proc.stderr
    assert proc.stderr.count("DIPU_VISIBLE_DEVICES") == 1, proc.stderr  # one message, no chained traceback


def test_the_vendors_own_variable_is_reported_as_given():
    proc = run("import ditorch", DIPU_VISIBLE_DEVICES="5")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "ditorch.detect.DetectionError: DIPU_VISIBLE_DEVICES='5': device 5 does not exist (droplet has 1 device: 0)")


def test_other_vendor_plugins_get_their_own_variable():
    got, _ = probe(setups=("npu",), CUDA_VISIBLE_DEVICES="1")
    assert (got["adapter"], got["ascend_visible"], got["dipu_visible"]) == ("npu", "1", None)


def test_nothing_is_passed_on_without_mocking():
    got, stderr = probe(CUDA_VISIBLE_DEVICES="", DITORCH_DISABLE_MOCK="1")
    assert (got["adapter"], got["dipu_visible"]) == ("dipu", None) and warnings(stderr) == []


def test_native_cuda_is_never_touched(monkeypatch):
    monkeypatch.delenv("DIPU_VISIBLE_DEVICES", raising=False)
    config = DitorchConfig(cuda_visible_devices="1")
    notes: list[str] = []
    for adapter in (builtin.cuda(), builtin.xpu(), builtin.mps()):
        assert adapter.visible_devices_env is None
        assert pass_visible_devices(adapter, config, notes) is None
    assert notes == [] and "DIPU_VISIBLE_DEVICES" not in os.environ
    expected = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "mlu": "MLU_VISIBLE_DEVICES", "musa": "MUSA_VISIBLE_DEVICES",
                "biren": "SUPA_VISIBLE_DEVICES", "dipu": "DIPU_VISIBLE_DEVICES"}
    assert {name: builtin.FACTORIES[name]().visible_devices_env for name in expected} == expected
