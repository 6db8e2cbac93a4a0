"""Autograd and optimizers on dipu give the CPU's results."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_grads_equal_cpu():
    model = _model()
    model_d = copy.deepcopy(model).dipu()
    x = torch.randn(5, 6)
    loss = model(x).pow(2).mean()
    loss_d = model_d(x.dipu()).pow(2).mean()
    loss.backward()
    loss_d.backward()
    torch.testing.assert_close(loss_d.cpu(), loss)
    for p, pd in zip(model.parameters(), model_d.parameters(), strict=True):
        assert pd.grad is not None and pd.grad.is_dipu
        torch.testing.assert_close(pd.grad.cpu(), p.grad)


def test_foreach_is_default_for_dipu_params():
    params = [torch.nn.Parameter(torch.ones(3, device="dipu"))]
    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    assert (fused, foreach) == (False, True)


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "AdamW"])
@pytest.mark.parametrize("foreach", [None, False])
def test_optimizer_steps_equal_cpu(opt_name, foreach):
    kwargs = {"lr": 0.05, "foreach": foreach}
    if opt_name == "SGD":
        kwargs["momentum"] = 0.9
    model = _model()
    model_d = copy.deepcopy(model).dipu()
    opt = getattr(torch.optim, opt_name)(model.parameters(), **kwargs)
    opt_d = getattr(torch.optim, opt_name)(model_d.parameters(), **kwargs)
    x = torch.randn(4, 6)
    for _ in range(3):
        for m, o, inp in ((model, opt, x), (model_d, opt_d, x.dipu())):
            o.zero_grad()
            m(inp).square().sum().backward()
            o.step()
    for p, pd in zip(model.parameters(), model_d.parameters(), strict=True):
        assert pd.is_dipu
        torch.testing.assert_close(pd.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    pairs = zip(model.parameters(), _model().parameters(), strict=True)
    moved = any(not torch.equal(p.detach(), q.detach()) for p, q in pairs)
    assert moved, "the optimizer must have changed the parameters"


@pytest.mark.parametrize("device", ["cpu", "dipu"])
def test_foreach_inplace_ops_bump_versions_so_autograd_sees_the_write(device: str) -> None:
    """A tensor saved for backward and then changed by an in-place foreach op must make backward() fail, as on the
    CPU and CUDA, never give a silently wrong gradient: the version of every tensor in a written list moves."""
    a = [torch.ones(3, device=device), torch.ones(2, device=device)]
    before = [t._version for t in a]
    torch._foreach_add_(a, [torch.ones(3, device=device), torch.ones(2, device=device)])
    assert [t._version for t in a] == [v + 1 for v in before]
    x = torch.ones(3, device=device, requires_grad=True)
    y = x * 1
    z = y.sin()  # saves y
    torch._foreach_mul_([y], 2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
