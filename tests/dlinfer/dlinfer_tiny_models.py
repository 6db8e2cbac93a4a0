"""Tiny generation configs for the dlinfer adaptor tests: Llama, Qwen2, Qwen3, Qwen3-MoE and Mixtral with 2
layers, hidden 64, 4 query heads over 2 key/value heads (head_dim 16), vocab 256, float32, seeded weights.

Weights are drawn with ``initializer_range`` 0.2 (not transformers' 0.02) so that the greedy next token has a
clear margin: fp32 rounding differences between two correct implementations then never flip an argmax.
"""

from __future__ import annotations

import torch

__all__ = ["FAMILIES", "PAD_ID", "build", "padded_prompts"]

FAMILIES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral")
VOCAB = 256
PAD_ID = 0
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2, pad_token_id=PAD_ID,
               bos_token_id=1, eos_token_id=2)


def _config(name: str):  # noqa: ANN202 - a transformers config
    import transformers as tf

    if name == "llama":
        return tf.LlamaConfig(**_COMMON)
    if name == "qwen2":
        return tf.Qwen2Config(**_COMMON, tie_word_embeddings=True)
    if name == "qwen3":
        return tf.Qwen3Config(**_COMMON, head_dim=16, tie_word_embeddings=True)
    if name == "qwen3_moe":
        return tf.Qwen3MoeConfig(**_COMMON, head_dim=16, moe_intermediate_size=32, num_experts=4,
                                 num_experts_per_tok=2, norm_topk_prob=True)
    if name == "mixtral":
        return tf.MixtralConfig(**_COMMON, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    raise ValueError(f"unknown tiny family {name!r} (known: {', '.join(FAMILIES)})")


def build(name: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The tiny ``name`` model (a ``*ForCausalLM``) in eval mode, weights drawn from ``seed`` (the global random
    state is left as it was)."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(_config(name))
    return model.to(dtype).eval()


def padded_prompts(lengths: tuple[int, ...] = (7, 4), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A left-padded batch ``(input_ids, attention_mask)`` of prompts of ``lengths`` tokens (ids 3..VOCAB-1)."""
    from dlinfer.framework.transformers.tiny_models import prompts

    return prompts(vocab=VOCAB, seed=seed, lengths=lengths)
