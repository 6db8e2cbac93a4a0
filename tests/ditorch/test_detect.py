"""Detection and activation by ``import ditorch``: one subprocess per fake vendor setup."""

from __future__ import annotations

import json
import re

import pytest
from vendor_env import PROBE, run_python

BANNER = re.compile(r"^ditorch: (.+) (\S+):(\S+) pid: (\d+)$")


def probe(*setups: str, **env: str) -> tuple[dict, list[str]]:
    proc = run_python("-c", PROBE, setups=setups, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr.splitlines()


def banners(stderr: list[str]) -> list[re.Match]:
    return [m for m in map(BANNER.match, stderr) if m]


def test_fake_npu_wins_over_dipu():
    result, stderr = probe("npu")
    assert result["adapter"] == "npu"
    assert result["dist_backend"] == "hccl"
    assert result["privateuse1"] == "npu"
    assert result["imported"] == ["torch_npu"], "dipu must not be imported once npu is chosen"
    assert result["failures"] == []
    assert result["mocked"] and not result["transformers"]
    [banner] = banners(stderr)
    assert banner.groups() == ("Fake Ascend 910B", "torch_npu", "2.1.0.fake", str(result["pid"]))
    assert stderr == [banner.string]


def test_only_dipu_installed_chooses_dipu():
    result, stderr = probe()
    assert (result["adapter"], result["dist_backend"], result["failures"]) == ("dipu", "dicl", [])
    assert stderr == [f"ditorch: droplet (simulated accelerator) torch_dipu:0.1.0 pid: {result['pid']}"]


def test_broken_plugin_is_reported_and_detection_continues():
    result, stderr = probe("broken_mlu")
    assert result["adapter"] == "dipu"
    [(name, error)] = result["failures"]
    assert name == "mlu" and "torch_mlu" in error and "libcnrt.so" in error
    warnings = [line for line in stderr if "warning" in line]
    assert len(warnings) == 1 and "mlu" in warnings[0] and "torch_mlu" in warnings[0] and "libcnrt.so" in warnings[0]
    assert len(banners(stderr)) == 1


def test_broken_entry_point_is_reported_and_detection_continues():
    result, stderr = probe("bad_entry_point")
    assert result["adapter"] == "dipu"
    [(name, error)] = result["failures"]
    assert name == "broken" and "fake_ditorch_plugin_missing" in error
    assert any("warning" in line and "broken" in line for line in stderr)


def test_vendor_override_forces_dipu_over_npu():
    result, _ = probe("npu", DITORCH_VENDOR="dipu")
    assert (result["adapter"], result["privateuse1"], result["imported"]) == ("dipu", "dipu", ["torch_dipu"])


def test_vendor_override_cpu():
    result, stderr = probe(DITORCH_VENDOR="cpu")
    assert result["adapter"] is None and result["imported"] == []
    assert banners(stderr)[0].group(1, 2) == ("cpu", "torch")


def test_no_device_means_cpu():
    result, stderr = probe(DROPLET_DEVICE_COUNT="0")
    assert result["adapter"] is None
    [banner] = banners(stderr)
    assert banner.group(1, 2) == ("cpu", "torch")


def test_disable_mock_skips_activation():
    result, _ = probe("npu", DITORCH_DISABLE_MOCK="1")
    assert result["adapter"] == "npu" and not result["mocked"]


def test_quiet_silences_the_banner():
    result, stderr = probe("npu", DITORCH_QUIET="1")
    assert result["adapter"] == "npu" and stderr == []


@pytest.mark.parametrize(("setup", "vendor", "expected"), [
    ((), "nosuch", ["'nosuch' is neither a known adapter", "nor an installed plugin package",
                    "known: biren, cuda, dipu, mlu, mps, musa, npu, xpu, cpu"]),
    (("broken_mlu",), "mlu", ["DITORCH_VENDOR=mlu", "torch_mlu failed", "libcnrt.so"]),
    ((), "npu", ["DITORCH_VENDOR=npu", "torch_npu is not installed"]),
])
def test_bad_vendor_override_is_one_clear_error(setup, vendor, expected):
    proc = run_python("-c", "import ditorch", setups=setup, DITORCH_VENDOR=vendor)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ditorch.detect.DetectionError: ")
    for text in expected:
        assert text in last, last
    assert proc.stderr.count("DITORCH_VENDOR=") == 1, proc.stderr  # one message, no chained traceback


def test_adapters_are_ordered_and_detecting_again_after_mocking_gives_the_same_choice():
    code = ("import ditorch as d; found = d.detect.detect(); "
            "print(*[a.name for a in d.detect.load_adapters()[0]], (found.adapter, found.failures))")
    proc = run_python("-c", code, DITORCH_QUIET="1")
    names = ["npu", "mlu", "musa", "biren", "cuda", "xpu", "mps", "dipu"]
    assert proc.stdout.split(maxsplit=len(names))[:len(names)] == names, proc.stderr
    assert proc.stdout.rstrip().endswith("name='dipu', framework='torch_dipu', device_type='dipu', "
                                         "dist_backend='dicl', priority=90, "
                                         "visible_devices_env='DIPU_VISIBLE_DEVICES'), [])"), proc.stdout
