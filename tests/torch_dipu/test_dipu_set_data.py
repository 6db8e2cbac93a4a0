"""``tensor.data = other`` on dipu: metadata and vendor storage move together (Module.to(dtype) relies on it)."""

from __future__ import annotations

import torch

import torch_dipu  # noqa: F401


def test_module_to_dtype_converts_the_stored_values() -> None:
    module = torch.nn.Linear(4, 3).to("dipu")
    expected = module.weight.detach().cpu().to(torch.bfloat16)
    module.to(torch.bfloat16)
    assert module.weight.dtype == module.weight.data.dtype == torch.bfloat16
    assert torch.equal(module.weight.detach().cpu(), expected)
    out = module(torch.ones(2, 4, dtype=torch.bfloat16, device="dipu"))
    assert out.dtype == torch.bfloat16


def test_assigning_data_aliases_the_new_storage() -> None:
    p = torch.nn.Parameter(torch.zeros(3, device="dipu"))
    new = torch.arange(3.0, device="dipu")
    p.data = new
    assert p.tolist() == [0.0, 1.0, 2.0] and p.requires_grad
    new.add_(10)
    assert p.tolist() == [10.0, 11.0, 12.0]  # shares the storage, as on any device


def test_pure_bf16_adamw_step_runs() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)).to("dipu").to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    model(torch.randn(4, 8, dtype=torch.bfloat16, device="dipu")).sum().backward()
    opt.step()
    assert all(s["exp_avg"].dtype == torch.bfloat16 for s in opt.state.values())
    assert all(not torch.equal(b, p.detach().cpu()) for b, p in zip(before, model.parameters(), strict=True))
