"""torch_dipu.count_function_calls: which DIOPI functions' vendor kernels ran; silu's backward reaches the vendor."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torch_dipu
from torch_dipu import dispatch
from torch_dipu.tensor import _HANDLERS
from torch_dipu.vendors import droplet


def _silu_grad(x: torch.Tensor) -> torch.Tensor:
    xd = x.dipu().requires_grad_()
    F.silu(xd).sum().backward()
    return xd.grad.cpu()


def test_silu_forward_and_backward_are_counted() -> None:
    x = torch.randn(8, 5).dipu().requires_grad_()
    with torch_dipu.count_function_calls() as calls:
        F.silu(x).sum().backward()
    assert calls["diopiSilu"] == 1 and calls["diopiSiluBackward"] == 1
    assert calls["diopiSum"] == 1 and "diopiSigmoid" not in calls  # silu_backward is not decomposed


def test_a_silu_backward_fault_changes_the_gradient_and_a_fallback_does_not() -> None:
    x = torch.randn(8, 5)
    xc = x.clone().requires_grad_()
    F.silu(xc).sum().backward()
    assert torch.equal(_silu_grad(x), xc.grad)
    with droplet.switches(faults="silu_backward:bias:0.5"):
        assert torch.equal(_silu_grad(x), xc.grad + 0.5)
        torch_dipu.set_force_fallback("silu_backward")
        with torch_dipu.count_function_calls() as calls:
            assert torch.equal(_silu_grad(x), xc.grad)
        assert "diopiSiluBackward" not in calls and calls["diopiSilu"] == 1  # fallbacks are not counted


def test_counters_nest_and_cost_nothing_when_closed() -> None:
    x = torch.ones(3).dipu()
    with torch_dipu.count_function_calls() as outer:
        x + x
        with torch_dipu.count_function_calls() as inner:
            x * x
        x.neg()
    assert outer == {"diopiAdd": 1, "diopiMul": 1, "diopiNeg": 1} and inner == {"diopiMul": 1}
    assert "count" not in dispatch.handler_wrappers and not _HANDLERS  # plain handlers are rebuilt on demand
    x + x
    assert outer["diopiAdd"] == 1
    assert dispatch.plain_handler(_HANDLERS[id(torch.ops.aten.add.Tensor)]).__name__ == "handler"


def test_counting_survives_a_vendor_switch_change() -> None:
    x = torch.ones(3).dipu()
    with torch_dipu.count_function_calls() as calls:
        x + x
        with droplet.switches(faults="add.Tensor:bias"):  # droplet's change drops the handlers
            assert (x + x).cpu().tolist() == [3.0, 3.0, 3.0]
    assert calls["diopiAdd"] == 2
