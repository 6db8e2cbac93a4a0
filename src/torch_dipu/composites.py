"""Device-level kernels for composite operators that would otherwise decompose into a slow path.

``scaled_dot_product_attention`` picks a fused kernel per device type with a C++ stub that a
Python backend cannot extend, so on dipu it would always take the unfused math path (a dozen small
operators). Registered on the AutogradPrivateUse1 key, the kernel below chooses the fused attention
operator the vendor serves (``diopiScaledDotProductAttention``) whenever its constraints hold, and
the math path otherwise. Autograd records the inner operator as usual.

``ctc_loss`` with length tensors is overridden the same way so that lengths may stay on the host, as on CUDA.
"""

from __future__ import annotations

import torch

from torch_dipu.tensor import storage_of

aten = torch.ops.aten


def _additive_mask(attn_mask, dtype: torch.dtype):  # noqa: ANN001, ANN202
    """A boolean mask as PyTorch prepares it for the CPU's kernels (fused and math alike): 0 where
    attention is allowed, -inf elsewhere, in the query's dtype. Float masks pass unchanged."""
    if attn_mask is None or attn_mask.dtype != torch.bool:
        return attn_mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=attn_mask.device)
    minus_inf = torch.scalar_tensor(float("-inf"), dtype=dtype, device=attn_mask.device)
    return torch.where(attn_mask, zero, minus_inf)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False  # noqa: ANN001
):  # noqa: ANN201
    attn_mask = _additive_mask(attn_mask, query.dtype)
    fused = dropout_p == 0.0 and query.dim() == 4 and aten._fused_sdp_choice(
        storage_of(query), storage_of(key), storage_of(value), storage_of(attn_mask), dropout_p, is_causal,
        scale=scale, enable_gqa=enable_gqa,
    ) == int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)
    if fused:  # the fused kernel takes grouped-query key/value heads as they are
        return aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]
    return aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )[0]


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1, zero_infinity=False):  # noqa: ANN001, ANN201
    """``F.ctc_loss`` with length tensors: lengths may live on the host (as CUDA accepts them). PyTorch's own
    composite would divide the device loss by a host tensor for ``reduction="mean"``; the list overload it
    mirrors builds that divisor on the device instead. Lengths are read on the host either way, as CUDA does."""
    return aten.ctc_loss.IntList(
        log_probs, targets, input_lengths.tolist(), target_lengths.tolist(), blank, reduction, zero_infinity
    )


def register(lib: torch.library.Library) -> None:
    """Register the composite overrides into ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradPrivateUse1")
    lib.impl("ctc_loss.Tensor", ctc_loss, "AutogradPrivateUse1")
