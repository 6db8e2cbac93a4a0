"""Device-level kernels for composite operators that would otherwise decompose into a slow path.

``scaled_dot_product_attention`` picks a fused kernel per device type with a C++ stub that a
Python backend cannot extend, so on dipu it would always take the unfused math path (a dozen small
operators). Registered on the AutogradPrivateUse1 key, the kernel below chooses the fused attention
operator the vendor serves (``diopiScaledDotProductAttention``) whenever its constraints hold, and
the math path otherwise. Autograd records the inner operator as usual.
"""

from __future__ import annotations

import torch

from torch_dipu.tensor import storage_of

aten = torch.ops.aten


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False  # noqa: ANN001
):  # noqa: ANN201
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


def register(lib: torch.library.Library) -> None:
    """Register the composite overrides into ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradPrivateUse1")
