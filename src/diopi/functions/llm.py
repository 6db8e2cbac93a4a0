"""Fused functions of LLM training and inference: attention, RMS norm, rotary embedding."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "llm"

# name | packets | tags | backward function | summary
TABLE = """
diopiScaledDotProductAttention | _scaled_dot_product_flash_attention_for_cpu | | diopiScaledDotProductAttentionBackward | Fused scaled dot-product attention (causal, dropout, scale), returning the log-sum-exp.
diopiScaledDotProductAttentionBackward | _scaled_dot_product_flash_attention_for_cpu_backward | backward | | Gradients of fused attention for query, key and value.
diopiFusedRMSNorm | diopi::rms_norm | | diopiFusedRMSNormBackward | RMS norm over the last dimension with weight, saving the inverse RMS.
diopiFusedRMSNormBackward | diopi::rms_norm_backward | backward | | Gradients of the fused RMS norm for input and weight.
diopiAddRMSNorm | diopi::add_rms_norm | | | Residual add and RMS norm in one kernel (decoder inference).
diopiRotaryEmbedding | diopi::rotary_embedding | | diopiRotaryEmbeddingBackward | Rotary position embedding, half-split or interleaved pairs.
diopiRotaryEmbeddingBackward | diopi::rotary_embedding_backward | backward | | Gradient of rotary embedding: the inverse rotation.
diopiSiluAndMul | diopi::silu_and_mul | | diopiSiluAndMulBackward | SwiGLU gate: silu(first half) * second half of the last dimension.
diopiSiluAndMulBackward | diopi::silu_and_mul_backward | backward | | Gradient of silu_and_mul.
diopiFlashAttentionVarlen | diopi::flash_attention_varlen | matmul | diopiFlashAttentionVarlenBackward | Attention over packed variable-length sequences (cu_seqlens, causal, scale, GQA).
diopiFlashAttentionVarlenBackward | diopi::flash_attention_varlen_backward | matmul backward | | Gradients of varlen attention for q, k and v from the saved log-sum-exp.
diopiPagedAttentionDecode | diopi::paged_attention_decode | matmul | | One decode step of attention over a paged KV cache (block tables).
diopiReshapeAndCache | diopi::reshape_and_cache | | | Write new keys and values into paged KV cache slots, in place.
diopiMoeGatingTopkSoftmax | diopi::moe_gating_topk_softmax | | | MoE routing: softmax over experts, top-k weights and indices.
"""
