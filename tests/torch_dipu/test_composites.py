"""scaled_dot_product_attention on dipu takes the fused kernel and matches CPU exactly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_uses_the_fused_kernel_and_matches_cpu(gqa: bool, causal: bool) -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    k = torch.randn(2, 2 if gqa else 4, 16, 8, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    qd, kd, vd = (t.detach().to("dipu").requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    out_d = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, enable_gqa=gqa)
    assert type(out_d.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
    cotangent = torch.randn_like(out)
    out.backward(cotangent)
    out_d.backward(cotangent.to("dipu"))
    torch.testing.assert_close(out_d.cpu(), out, rtol=0, atol=0)
    for cpu_t, dipu_t in ((q, qd), (k, kd), (v, vd)):
        torch.testing.assert_close(dipu_t.grad.cpu(), cpu_t.grad, rtol=0, atol=0)


def test_sdpa_with_dropout_takes_the_math_path() -> None:
    q = torch.randn(1, 2, 8, 4, device="dipu", requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert out.shape == (1, 2, 8, 4)
    assert "FlashAttention" not in type(out.grad_fn).__name__
