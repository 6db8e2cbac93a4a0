"""Autocast on dipu follows CUDA's policy for reductions and softmax: float32 unless the call gives its own
``dtype`` (PyTorch's "CUDA ops that can autocast to float32": softmax, log_softmax, sum, prod, cumsum,
cumprod, norms, cross_entropy), so AMP code computes its loss as it does on CUDA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_dipu  # noqa: F401  (registers the dipu device)


def _x() -> torch.Tensor:
    return torch.randn(4, 10, generator=torch.Generator().manual_seed(0)).bfloat16()


@pytest.mark.parametrize("fn", [
    lambda x: F.softmax(x, 1), lambda x: F.log_softmax(x, 1), lambda x: x.sum(), lambda x: x.sum(1),
    lambda x: x.prod(1), lambda x: x.cumsum(0), lambda x: x.cumprod(0), lambda x: x.norm(),
    lambda x: torch.linalg.vector_norm(x),
], ids=["softmax", "log_softmax", "sum", "sum_dim", "prod_dim", "cumsum", "cumprod", "norm", "vector_norm"])
def test_reductions_run_in_float32_as_on_cuda(fn) -> None:
    x = _x()
    with torch.autocast("dipu", dtype=torch.bfloat16):
        out = fn(x.to("dipu"))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), fn(x.float()), rtol=1e-6, atol=1e-6)


def test_an_explicit_dtype_is_kept() -> None:
    x = _x().to("dipu")
    with torch.autocast("dipu", dtype=torch.bfloat16):
        assert F.softmax(x, 1, dtype=torch.bfloat16).dtype == torch.bfloat16
        assert x.sum(dtype=torch.bfloat16).dtype == torch.bfloat16
        assert torch.arange(4, device="dipu").sum().dtype == torch.int64


def test_cross_entropy_under_autocast_is_the_float32_loss() -> None:
    x, y = _x(), torch.tensor([1, 2, 3, 4])
    with torch.autocast("dipu", dtype=torch.bfloat16):
        loss = F.cross_entropy(x.to("dipu"), y.to("dipu"))
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.cpu(), F.cross_entropy(x.float(), y), rtol=1e-6, atol=1e-6)
