"""Detection of a plugin that has no adapter: the generic adapter (ditorch.adapters.generic), one subprocess each.

The fakes (fake_vendors/README.md): ``autoload_acme`` is loaded by PyTorch's backend autoload on ``import torch``
(its dist-info publishes a ``torch.backends`` entry point) and has no ditorch adapter; ``hollow_plugin`` imports but
reports no device; ``raising_adapter`` publishes a ``ditorch.adapters`` entry point that raises.
"""

from __future__ import annotations

import json
import re

from vendor_env import PROBE, run_python

HELD = ("PrivateUse1 is held by torch_acme (device 'acme', loaded on import torch by PyTorch's backend autoload, "
        "entry point 'torch_acme' in torch.backends; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off)")


def _probe(*setups: str, code: str = PROBE, **env: str) -> tuple[dict, list[str]]:
    proc = run_python("-c", code, setups=setups, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr.splitlines()


def _error_line(*setups: str, args: tuple[str, ...] = ("-m", "ditorch", "info"), **env: str) -> str:
    proc = run_python(*args, setups=setups, **env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    # one line, no traceback: ``ditorch <command>: error: ...``
    assert len(lines) == 1 and re.match(r"ditorch [a-z-]+: error: ", lines[0]), proc.stderr
    return lines[0]


def test_an_autoloaded_plugin_without_an_adapter_is_used_not_the_cpu():
    result, stderr = _probe("autoload_acme")
    assert result["privateuse1"] == "acme" and result["imported"] == []  # torch_dipu never imported beside it
    assert (result["adapter"], result["dist_backend"], result["failures"], result["mocked"]) == (
        "acme", "acmeccl", [], True)
    assert stderr == [f"ditorch: Acme X1 torch_acme:0.3 pid: {result['pid']}"]  # no warning: nothing failed


def test_the_mapping_answers_for_the_autoloaded_plugin():
    code = ("import torch, ditorch; print(torch.cuda.is_available(), torch.cuda.device_count(), "
            "torch.cuda.get_device_name(1), torch.empty(2, device='cuda:1').device, ditorch.adapter.describe())")
    proc = run_python("-c", code, setups=("autoload_acme",), DITORCH_QUIET="1")
    assert proc.stdout.split(maxsplit=4) == [
        "True", "2", "Acme", "X1", "acme:1 generic: PrivateUse1 backend 'acme' of torch_acme, loaded by PyTorch's "
        "backend autoload (torch.backends entry point 'torch_acme')\n"], proc.stderr


def test_info_says_which_plugin_and_how():
    proc = run_python("-m", "ditorch", "info", setups=("autoload_acme",), DITORCH_QUIET="1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == ("framework: torch_acme 0.3 (generic: PrivateUse1 backend 'acme' of torch_acme, loaded by "
                        "PyTorch's backend autoload (torch.backends entry point 'torch_acme'))")
    assert "  acme:0-1  Acme X1  64.0 GiB" in lines
    assert f"  dipu   torch_dipu   90  not tried: {HELD}" in lines
    assert " *acme   torch_acme  1000  active" in lines


def test_torch_dipu_refuses_in_one_line_naming_the_plugin():
    proc = run_python("-c", "import torch_dipu", setups=("autoload_acme",))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"ImportError: torch_dipu cannot register the 'dipu' device: PrivateUse1 is already held by "
        f"{HELD.removeprefix('PrivateUse1 is held by ')}; one process holds one PrivateUse1 backend")


def test_a_plugin_imported_by_the_user_is_found_without_autoload():
    result, _ = _probe("autoload_acme", code="import torch_acme\n" + PROBE, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert (result["adapter"], result["imported"]) == ("acme", [])
    proc = run_python("-c", "import torch, torch_acme, ditorch; print(ditorch.adapter.describe())",
                      setups=("autoload_acme",), TORCH_DEVICE_BACKEND_AUTOLOAD="0", DITORCH_QUIET="1")
    assert proc.stdout.strip() == "generic: PrivateUse1 backend 'acme' of torch_acme", proc.stderr


def test_ditorch_vendor_names_the_device_or_the_package():
    result, _ = _probe("autoload_acme", DITORCH_VENDOR="acme")
    assert result["adapter"] == "acme"
    # with autoload off, DITORCH_VENDOR=<package> imports the plugin itself
    result, _ = _probe("autoload_acme", DITORCH_VENDOR="torch_acme", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert (result["adapter"], result["privateuse1"]) == ("acme", "acme")


def test_ditorch_vendor_that_cannot_load_beside_the_holder_is_one_line_exit_2():
    line = _error_line("autoload_acme", DITORCH_VENDOR="dipu")
    assert line == f"ditorch info: error: DITORCH_VENDOR=dipu: torch_dipu cannot load: {HELD}"


def test_ditorch_vendor_naming_a_plugin_that_is_not_installed():
    line = _error_line("autoload_acme", DITORCH_VENDOR="torch_nosuch")
    assert "DITORCH_VENDOR='torch_nosuch' is neither a known adapter (known: acme, biren, cuda, dipu, mlu, mps, " \
           "musa, npu, xpu, cpu) nor an installed plugin package" in line
    assert line.endswith("holds PrivateUse1: DITORCH_VENDOR=acme selects it")
    # the console script too, and `ditorch run`: the user's script never starts on the CPU
    assert _error_line(args=("-m", "ditorch", "run", "--", __file__), DITORCH_VENDOR="torch_nosuch").startswith(
        "ditorch run: error: DITORCH_VENDOR='torch_nosuch' is neither")


def test_an_adapter_whose_entry_point_raises():
    line = _error_line("raising_adapter", DITORCH_VENDOR="raising")
    assert line == ("ditorch info: error: DITORCH_VENDOR=raising: its adapter could not be loaded: entry point "
                    "'fake_raising_adapter:adapter' failed to load: RuntimeError: driver 5.1 is older than the 6.0 "
                    "this adapter needs (fake adapter for tests)")
    result, stderr = _probe("raising_adapter")  # without DITORCH_VENDOR: one warning, detection goes on
    assert result["adapter"] == "dipu" and [f[0] for f in result["failures"]] == ["raising"]
    assert [line for line in stderr if "warning" in line] == [
        "ditorch: warning: adapter raising skipped: entry point 'fake_raising_adapter:adapter' failed to load: "
        "RuntimeError: driver 5.1 is older than the 6.0 this adapter needs (fake adapter for tests)"]


def test_a_plugin_that_imports_but_has_no_device():
    line = _error_line("hollow_plugin", DITORCH_VENDOR="torch_hollow")
    assert line == ("ditorch info: error: DITORCH_VENDOR=torch_hollow: torch_hollow imported but reports no usable "
                    "hollow device")
    # imported by the user, without DITORCH_VENDOR: the CPU, and a warning saying why (never silently)
    result, stderr = _probe("hollow_plugin", code="import torch_hollow\n" + PROBE)
    assert result["adapter"] is None
    assert "ditorch: warning: torch_hollow (device 'hollow') holds PrivateUse1 but reports no usable device; " \
           "ditorch runs on the CPU" in stderr
