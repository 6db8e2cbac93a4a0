"""Module state across devices (torch_dipu/module_state.py): parameters keep their Python objects.

The workflow-level checks (tied weights train like the CPU, optimizers created before the move) are in
test_workflows.py; these pin down the mechanism: round trips, gradients, classes, lazy modules, errors.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

import torch_dipu
from torch_dipu.tensor import DipuTensor
from torch_dipu.vendors import droplet


class MyParameter(nn.Parameter):
    """A user's Parameter subclass."""


def test_round_trip_keeps_objects_gradients_and_classes() -> None:
    model = nn.Linear(3, 2)
    model.weight = MyParameter(model.weight.detach().clone())
    weight, bias = model.weight, model.bias
    model(torch.randn(4, 3)).sum().backward()
    grad = weight.grad
    expected = weight.detach().clone()

    model.to("dipu")
    assert model.weight is weight and model.bias is bias
    assert type(weight) is DipuTensor and isinstance(weight, nn.Parameter) and weight.device.type == "dipu"
    assert weight.grad is grad and grad.device.type == "dipu"
    assert torch.equal(weight.detach().cpu(), expected)

    model.to(torch.float64)  # a dtype change on the device keeps the object too
    assert model.weight is weight and weight.dtype == torch.float64 and weight._raw.dtype == torch.float64
    model.to("cpu", torch.float32)
    assert model.weight is weight and type(weight) is MyParameter and weight.device.type == "cpu"
    assert type(bias) is nn.Parameter and "_raw" not in vars(weight)
    assert weight.grad is grad and grad.device.type == "cpu"
    assert torch.equal(weight.detach(), expected)

    model.dipu()
    model(torch.randn(4, 3, device="dipu")).sum().backward()  # still a working dipu parameter
    assert weight.grad is grad and weight.requires_grad


def test_moves_without_dipu_are_pytorchs_own() -> None:
    model = nn.Linear(3, 2)
    weight = model.weight
    model.to(torch.float64)
    assert model.weight is weight and type(weight) is nn.Parameter and weight.dtype == torch.float64


def test_swap_tensors_conversion_also_works() -> None:
    model = nn.Linear(3, 2)
    weight = model.weight
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to("dipu")
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    assert model.weight is weight and weight.device.type == "dipu"
    assert model(torch.ones(1, 3, device="dipu")).device.type == "dipu"


@pytest.mark.parametrize("build", ["to", "device"])
def test_lazy_modules_stay_lazy_on_dipu(build: str) -> None:
    if build == "to":
        model = nn.Sequential(nn.LazyLinear(4), nn.LazyBatchNorm1d()).to("dipu")
    else:
        model = nn.Sequential(nn.LazyLinear(4, device="dipu"), nn.LazyBatchNorm1d(device="dipu"))
    linear, norm = model
    assert isinstance(linear.weight, UninitializedParameter) and linear.weight.device.type == "dipu"
    assert isinstance(norm.running_mean, UninitializedBuffer) and norm.running_mean.device.type == "dipu"
    weight = linear.weight
    out = model(torch.randn(5, 3, device="dipu"))
    assert out.shape == (5, 4) and out.device.type == "dipu"
    assert linear.weight is weight and type(weight) is DipuTensor and isinstance(weight, nn.Parameter)
    assert weight.shape == (4, 3) and type(norm.running_mean) is DipuTensor
    assert not isinstance(weight, UninitializedParameter)
    out.sum().backward()
    assert weight.grad.shape == (4, 3) and weight.grad.device.type == "dipu"


def test_lazy_module_moved_back_before_its_first_call() -> None:
    model = nn.LazyLinear(4).to("dipu").to("cpu")
    assert type(model.weight) is UninitializedParameter and model.weight.device.type == "cpu"
    assert model(torch.randn(2, 3)).device.type == "cpu"


def test_a_dtype_the_device_cannot_hold_names_the_tensor() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[1].register_buffer("scale", torch.ones(2, dtype=torch.float64))
    with droplet.switches(unsupported_dtypes={torch.float64}):
        with pytest.raises(torch_dipu.UnsupportedDtypeError,
                           match=r"cannot move buffer '1\.scale' \(torch\.float64 on cpu\) of Sequential: .*float64"):
            model.to("dipu")
        model = nn.Sequential(nn.Linear(2, 2)).to("dipu")
        with pytest.raises(torch_dipu.UnsupportedDtypeError,
                           match=r"parameter '0\.weight' \(torch\.float32 on dipu:0\) .*float64"):
            model.double()
    assert model[0].weight.dtype == torch.float32 and model[0].weight.device.type == "dipu"  # nothing lost
