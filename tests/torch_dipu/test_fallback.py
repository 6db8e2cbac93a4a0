"""CPU fallback: DIPU_FORCE_FALLBACK_OPS_LIST, its config file, logging, and the Python API."""

from __future__ import annotations

import pytest
import torch

import torch_dipu
from torch_dipu import kernels
from torch_dipu.state import get_state
from torch_dipu.vendors import droplet

aten = torch.ops.aten

_PROBE = """
import torch, torch_dipu
from torch_dipu import kernels
from torch_dipu.state import get_state
aten = torch.ops.aten
ops = {"add.Tensor": aten.add.Tensor, "add_.Tensor": aten.add_.Tensor, "mm": aten.mm.default,
       "mul.Tensor": aten.mul.Tensor, "mul.Scalar": aten.mul.Scalar, "sub.Tensor": aten.sub.Tensor}
for name, op in ops.items():
    print("KIND", name, kernels.select(op, get_state()).kind)
a = torch.ones(2, 2, device="dipu")
for _ in range(3):
    b = a + a
    c = a @ a
    d = a * a
assert torch.equal(b.cpu(), torch.full((2, 2), 2.0)) and torch.equal(c.cpu(), torch.full((2, 2), 2.0))
print("FALLBACK_OPS", sorted(torch_dipu.fallback_ops()))
"""


def _kinds(stdout: str) -> dict[str, str]:
    return {line.split()[1]: line.split()[2] for line in stdout.splitlines() if line.startswith("KIND ")}


def test_env_list_whole_name_trimmed_and_logged_once(run_python):
    env = {"DIPU_FORCE_FALLBACK_OPS_LIST": " add.Tensor ,  mm ,ad", "DIPU_LOG_FALLBACK_INFO": "1"}
    out = run_python(_PROBE, env=env)
    kinds = _kinds(out.stdout)
    assert kinds["add.Tensor"] == "fallback" and kinds["mm"] == "fallback"
    # whole-name match: "add.Tensor" does not force "add_.Tensor", and "ad" matches nothing
    assert kinds["add_.Tensor"] == "vendor" and kinds["mul.Tensor"] == "vendor" and kinds["sub.Tensor"] == "vendor"
    log_lines = [line for line in out.stdout.splitlines() if line.startswith("[torch_dipu] fallback to CPU")]
    assert sum("aten.add.Tensor " in line for line in log_lines) == 1, out.stdout
    assert sum("aten.mm " in line for line in log_lines) == 1, out.stdout
    assert not any("aten.mul.Tensor " in line for line in log_lines)
    assert len(log_lines) == len(set(log_lines)), "each op is logged once"
    listed = out.stdout.split("FALLBACK_OPS ")[-1]
    assert "'add.Tensor'" in listed and "'mm'" in listed


def test_config_file_in_working_directory(run_python, tmp_path):
    (tmp_path / ".dipu_force_fallback_op_list.config").write_text(".*.Scalar\n")
    kinds = _kinds(run_python(_PROBE, cwd=tmp_path).stdout)
    assert kinds["mul.Scalar"] == "fallback"
    assert kinds["mul.Tensor"] == "vendor" and kinds["add.Tensor"] == "vendor" and kinds["mm"] == "vendor"


def _kind(op) -> str:  # noqa: ANN001
    return kernels.select(op, get_state()).kind


def test_set_force_fallback_in_process():
    assert _kind(aten.add.Tensor) == "vendor"
    torch_dipu.set_force_fallback(".*.Scalar")
    assert _kind(aten.mul.Scalar) == "fallback" and _kind(aten.add.Scalar) == "fallback"
    assert _kind(aten.mul.Tensor) == "vendor"
    torch_dipu.set_force_fallback([" add.Tensor ", "mm"])
    assert _kind(aten.add.Tensor) == "fallback" and _kind(aten.mm.default) == "fallback"
    assert _kind(aten.mul.Scalar) == "vendor" and _kind(aten.add_.Tensor) == "vendor"
    torch_dipu.set_force_fallback(".*")
    assert _kind(aten.sub.Tensor) == "fallback" and _kind(aten.exp.default) == "fallback"
    x = torch.arange(4.0, device="dipu")
    assert torch.equal((x * 2 - 1).exp().cpu(), (torch.arange(4.0) * 2 - 1).exp())
    assert {"mul.Tensor", "sub.Tensor", "exp"} <= torch_dipu.fallback_ops()
    torch_dipu.set_force_fallback([])
    assert _kind(aten.sub.Tensor) == "vendor"


def test_forced_fallback_removes_injected_fault():
    """The seeds' debugging workflow: a wrong op becomes right when forced to the CPU."""
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with droplet.switches(faults="mm:bias:0.25"):
        wrong = (a.dipu() @ b.dipu()).cpu()
        torch.testing.assert_close(wrong, a @ b + 0.25)
        torch_dipu.set_force_fallback("mm")
        right = (a.dipu() @ b.dipu()).cpu()
        torch.testing.assert_close(right, a @ b)
        assert "mm" in torch_dipu.fallback_ops()
        torch_dipu.set_force_fallback([])
        torch.testing.assert_close((a.dipu() @ b.dipu()).cpu(), a @ b + 0.25)


def test_names_that_decompose_before_dispatch_warn():
    with pytest.warns(UserWarning, match=r"'conv2d' never matches.*convolution"):
        torch_dipu.set_force_fallback(["conv2d"])
    torch_dipu.set_force_fallback(["convolution"])  # the name it runs as: no warning
    x, w = torch.randn(1, 1, 4, 4), torch.randn(1, 1, 3, 3)
    with droplet.switches(faults="convolution:bias:1"):
        torch.testing.assert_close(torch.conv2d(x.to("dipu"), w.to("dipu")).cpu(), torch.conv2d(x, w))
