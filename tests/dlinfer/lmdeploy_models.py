"""Tiny model folders for LMDeploy's engine: a ``save_pretrained`` model (float32, seeded weights) with a
word-level tokenizer (``w4 .. w255``), built from a transformers config, no downloads."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["FAMILIES", "save_tiny_model"]

VOCAB = 256
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.2, pad_token_id=0,
               bos_token_id=1, eos_token_id=2)
#: model_type -> the config fields it needs on top of the common ones
FAMILIES: dict[str, dict] = {
    "llama": {},
    "qwen2": dict(tie_word_embeddings=True),
    "qwen2_moe": dict(moe_intermediate_size=32, shared_expert_intermediate_size=64, num_experts=4,
                      num_experts_per_tok=2, norm_topk_prob=False),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
}


def save_tiny_model(family: str, folder: Path, seed: int = 0) -> Path:
    """Write the tiny ``family`` model and its tokenizer into ``folder``; returns ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from dlinfer.framework.transformers.tiny_models import save_word_tokenizer

    config = AutoConfig.for_model(family, **_COMMON, **FAMILIES[family])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(folder)
    save_word_tokenizer(folder, VOCAB)
    return folder
