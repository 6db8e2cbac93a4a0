"""diopi.op_names: op-name lists checked at start (did you mean), while running (what matched) and at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from diopi.env import ConfigError
from diopi.op_names import CheckedOpList, aten_names, closest, ledger_lines

KNOWN = frozenset({"linear", "mm", "addmm", "max_pool2d", "max_pool2d_with_indices", "add", "add.Tensor"})


def test_closest_names_a_misspelling_and_a_relative() -> None:
    assert closest("linaer", KNOWN) == ["linear"]
    assert closest("max_pool2d_with_index", {"max_pool2d", "add"}) == ["max_pool2d"]
    assert closest("torch.nn.functional.linaer", {"torch.nn.functional.linear", "torch.add"}) == [
        "torch.nn.functional.linear"]
    assert closest("zzzz", KNOWN) == []


def test_unknown_entries_warn_once_with_the_closest_names(capfd: pytest.CaptureFixture[str]) -> None:
    names = CheckedOpList(["linaer", "mm", "add.*", "nothing_like_it.*"], "TEST_A_LIST", lambda: KNOWN)
    assert names.check(strict_mode=False) == [
        "TEST_A_LIST entry 'linaer' names no operator (did you mean linear?)",
        "TEST_A_LIST entry 'nothing_like_it.*' names no operator",
    ]
    CheckedOpList(["linaer"], "TEST_A_LIST", lambda: KNOWN).check(strict_mode=False)  # built again: no new line
    err = capfd.readouterr().err.splitlines()
    assert err == ["ditorch: warning: TEST_A_LIST entry 'linaer' names no operator (did you mean linear?)",
                   "ditorch: warning: TEST_A_LIST entry 'nothing_like_it.*' names no operator"]


def test_strict_mode_raises_naming_the_entry() -> None:
    names = CheckedOpList(["mm", "linaer"], "TEST_B_LIST", lambda: KNOWN)
    with pytest.raises(ConfigError, match=r"TEST_B_LIST entry 'linaer' names no operator \(did you mean linear\?\) "
                                          r"\[DITORCH_STRICT=1\]"):
        names.check(strict_mode=True)
    assert not any("TEST_B_LIST" in line for line in ledger_lines())  # the run stops: no exit lines about it


def test_accepts_lets_a_valid_name_outside_the_known_set_through() -> None:
    names = CheckedOpList(["my_lib.fused_op"], "TEST_C_LIST", lambda: KNOWN, accepts=lambda e: e == "my_lib.fused_op")
    assert names.check(strict_mode=True) == []


def test_exit_lines_name_entries_that_matched_no_call_and_similar_names_that_ran() -> None:
    names = CheckedOpList(["max_pool2d_with_indices", "mm"], "TEST_D_LIST", lambda: KNOWN)
    assert names.matches("max_pool2d") is False
    assert names.matches("mm") is True
    assert names.matches("add.Tensor", "add") is False
    lines = [line for line in ledger_lines() if "TEST_D_LIST" in line]
    assert lines == ["ditorch: warning: TEST_D_LIST entry 'max_pool2d_with_indices' matched no call; ops that ran "
                     "with a similar name: max_pool2d"]


def test_a_question_that_is_not_a_call_does_not_count() -> None:
    names = CheckedOpList(["mm"], "TEST_E_LIST", lambda: KNOWN)
    assert names.matches("mm", record=False) is True
    assert any("TEST_E_LIST entry 'mm' matched no call" in line for line in ledger_lines())


def test_aten_names_hold_packets_overloads_and_optionally_diopi_functions() -> None:
    names = aten_names()
    assert {"add", "add.Tensor", "mm", "mm.default", "max_pool2d_with_indices"} <= names
    from diopi.registry import functions

    extra = {fn.name for fn in functions()} - names
    assert extra and extra <= aten_names(True)


def test_a_fault_on_an_op_the_vendor_never_sees_is_named_at_exit(tmp_path) -> None:
    """max_pool2d is claimed on dipu, so max_pool2d_with_indices never reaches the vendor: the fault injects
    nothing, and the exit line says so and names the op that ran instead."""
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent("""
        import torch, torch_dipu
        x = torch.randn(1, 2, 8, 8, device="dipu")
        y = torch.nn.functional.max_pool2d(x, 2)
        print(bool((y.cpu() == torch.nn.functional.max_pool2d(x.cpu(), 2)).all()))
    """))
    env = {"DROPLET_FAULTS": "max_pool2d_with_indices:bias", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"  # no fault was injected
    assert ("DROPLET_FAULTS entry 'max_pool2d_with_indices' matched no call; ops that ran with a similar name: "
            "max_pool2d") in proc.stderr
