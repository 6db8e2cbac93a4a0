"""``ditorch info`` and the DITORCH_* settings."""

from __future__ import annotations

from vendor_env import run_python


def info(*setups: str, **env: str) -> str:
    proc = run_python("-m", "ditorch", "info", setups=setups, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_info_lists_framework_devices_adapters_and_switches():
    out = info(DITORCH_QUIET="1", DITORCH_DISABLE_MOCK="1")
    assert "framework: torch_dipu 0.1.0" in out
    assert "droplet (simulated accelerator)  16.0 GiB" in out
    assert "mocking: off (DITORCH_DISABLE_MOCK=1)" in out
    adapters = out.split("adapters:\n", 1)[1].split("switches:", 1)[0]
    for name in ("npu", "mlu", "musa", "biren", "cuda", "xpu", "mps", "dipu"):
        assert f" {name} " in adapters or f"*{name} " in adapters
    assert "*dipu" in adapters and "not installed" in adapters
    assert "DITORCH_QUIET=1" in out and "DITORCH_DISABLE_MOCK=1" in out


def test_info_with_fake_npu_and_failures():
    out = info("npu", DITORCH_QUIET="1")
    assert "framework: torch_npu 2.1.0.fake (adapter npu)" in out
    assert "npu:0-1  Fake Ascend 910B  64.0 GiB" in out
    out = info("broken_mlu", DITORCH_QUIET="1", DITORCH_TYPO="1")
    assert "failed" in out and "libcnrt.so" in out
    assert "DITORCH_TYPO=1  (unknown" in out
