"""Another library's operator with a kernel on the PrivateUse1 key runs that kernel on dipu tensors, as it would on a
C++ backend, with autograd on, under no_grad and under inference_mode; operators without one keep torch_dipu's route."""

from __future__ import annotations

import contextlib

import pytest
import torch

from torch_dipu import device_kernels
from torch_dipu.tensor import DipuTensor

_NS = "dipu_custom_op_test"
_DEF = torch.library.Library(_NS, "DEF")
_DEF.define("scaled(Tensor x, *, float alpha=1.0) -> Tensor")
_DEF.define("shifted(Tensor x) -> Tensor")
_RAN: list[tuple[str, str, str]] = []


def _scaled_on_device(x: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    _RAN.append(("device", type(x).__name__, x.device.type))
    return x * alpha


def _scaled_composite(x: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    _RAN.append(("composite", type(x).__name__, x.device.type))
    return x * alpha


def _shifted_composite(x: torch.Tensor) -> torch.Tensor:
    _RAN.append(("composite", type(x).__name__, x.device.type))
    return x + 1


_DEF.impl("scaled", _scaled_composite, "CompositeExplicitAutograd")
_DEF.impl("shifted", _shifted_composite, "CompositeExplicitAutograd")
# The device kernel comes from another library than the one defining the operator, as a vendor's would.
_IMPL = torch.library.Library(_NS, "IMPL")
_IMPL.impl("scaled", _scaled_on_device, "PrivateUse1")

_MODES = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


@pytest.fixture(autouse=True)
def _clear_ran():
    _RAN.clear()
    yield
    _RAN.clear()


@pytest.mark.parametrize("mode", list(_MODES))
def test_private_use1_kernel_runs_on_dipu_tensors(mode):
    x = torch.arange(6.0).reshape(2, 3).to("dipu")
    with _MODES[mode]():
        out = torch.ops.dipu_custom_op_test.scaled(x, alpha=3.0)
    assert _RAN == [("device", "DipuTensor", "dipu")]
    assert type(out) is DipuTensor and out.device == x.device
    assert torch.equal(out.cpu(), torch.arange(6.0).reshape(2, 3) * 3)


@pytest.mark.parametrize("mode", list(_MODES))
def test_default_arguments_and_positional_calls(mode):
    x = torch.ones(3).to("dipu")
    with _MODES[mode]():
        out = torch.ops.dipu_custom_op_test.scaled.default(x)
    assert _RAN == [("device", "DipuTensor", "dipu")]
    assert torch.equal(out.cpu(), torch.ones(3))


def test_host_tensors_keep_the_composite_kernel():
    out = torch.ops.dipu_custom_op_test.scaled(torch.ones(2), alpha=2.0)
    assert _RAN == [("composite", "Tensor", "cpu")]
    assert torch.equal(out, torch.full((2,), 2.0))


@pytest.mark.parametrize("mode", list(_MODES))
def test_operator_without_a_device_kernel_keeps_the_host_route(mode):
    x = torch.zeros(4).to("dipu")
    with _MODES[mode]():
        out = torch.ops.dipu_custom_op_test.shifted(x)
    assert _RAN == [("composite", "Tensor", "cpu")]  # torch_dipu's route: the operator on the storage tensors
    assert type(out) is DipuTensor and torch.equal(out.cpu(), torch.ones(4))


def test_only_non_aten_operators_with_a_private_use1_kernel_take_the_route():
    assert device_kernels.has_device_kernel(torch.ops.dipu_custom_op_test.scaled.default)
    assert not device_kernels.has_device_kernel(torch.ops.dipu_custom_op_test.shifted.default)
    # torch_dipu registers aten.empty_strided on PrivateUse1 itself; ATen operators keep torch_dipu's kernels.
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty_strided", "PrivateUse1")
    assert not device_kernels.has_device_kernel(torch.ops.aten.empty_strided.default)
    assert not device_kernels.has_device_kernel(torch.ops.aten.add.Tensor)
