"""Fused functions of LLM training and inference: attention, RMS norm, rotary embedding."""

FAMILY = "llm"

# name | packets | tags | backward function | summary
TABLE = """
diopiScaledDotProductAttention | _scaled_dot_product_flash_attention_for_cpu |
diopiScaledDotProductAttentionBackward | _scaled_dot_product_flash_attention_for_cpu_backward | backward
"""
