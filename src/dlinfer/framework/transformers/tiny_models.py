"""Tiny models of any causal-LM architecture transformers has, from its config class alone (no download).

A config class's defaults are shrunk generically: every size attribute it has (hidden size, layers, heads,
experts, vocabulary, positions, window, latent ranks, ...) is set to a tiny value, sub-configs (``text_config``,
``vision_config``, ...) too; a model with alternating full/sliding layers gets one of each. Weights are drawn with
``initializer_range`` 0.2 (transformers' default is 0.02) so that greedy argmaxes have a margin: rounding
differences between two correct implementations then do not flip a token. Used by the coverage table (coverage.py)
and its test.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["NEW_TOKENS", "PAD_ID", "PROMPT_LENGTHS", "WINDOW", "architectures", "build", "prompts", "tiny_config"]

PAD_ID = 0
VOCAB = 256
WINDOW = 4           # sliding windows: the longer prompt (7 tokens) crosses them, and every decode step
PROMPT_LENGTHS = (7, 4)
NEW_TOKENS = 12

#: attribute -> tiny value, set where the default config has the attribute with a number (not None)
_SIZES: dict[str, int | float] = {
    "vocab_size": VOCAB, "hidden_size": 64, "d_model": 64, "n_embd": 64, "embed_dim": 64,
    "intermediate_size": 128, "ffn_dim": 128, "n_inner": 128, "decoder_ffn_dim": 128, "encoder_ffn_dim": 128,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2, "decoder_layers": 2, "encoder_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "n_heads": 4, "decoder_attention_heads": 4,
    "encoder_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "attention_head_dim": 16,
    "max_position_embeddings": 128, "n_positions": 128, "sliding_window": WINDOW, "sliding_window_size": WINDOW,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "shared_intermediate_size": 32,
    "expert_intermediate_size": 32, "num_experts": 4, "n_routed_experts": 4, "num_local_experts": 4,
    "moe_num_experts": 4, "num_experts_per_tok": 2, "moe_topk": 2, "num_experts_per_token": 2, "n_shared_experts": 1,
    "num_shared_experts": 1, "moe_num_shared_experts": 1, "n_group": 1, "topk_group": 1, "num_expert_group": 1,
    "first_k_dense_replace": 1, "num_dense_layers": 1, "decoder_sparse_step": 1, "initializer_range": 0.2,
    "init_std": 0.2, "rotary_dim": 8, "query_pre_attn_scalar": 16, "kv_lora_rank": 16, "q_lora_rank": 24,
    "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16, "qk_head_dim": 32, "index_head_dim": 16,
    "index_n_heads": 2, "index_topk": 8, "num_kv_shared_layers": 0, "swa_num_attention_heads": 4,
    "swa_num_key_value_heads": 2, "swa_head_dim": 16, "sliding_window_pattern": 2, "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": 16, "mamba_d_state": 16, "mamba_n_heads": 4, "mamba_d_head": 32,
    "mamba_n_groups": 1, "state_size": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_num_heads": 4, "linear_head_dim": 16,
    "attention_hidden_size": 64, "num_nextn_predict_layers": 0, "max_window_layers": 1,
}
_TOKENS = {"pad_token_id": PAD_ID, "bos_token_id": 1, "eos_token_id": 2}
_FULL, _SLIDING = "full_attention", "sliding_attention"


def architectures() -> dict[str, str]:
    """``model_type -> *ForCausalLM class name`` for every causal-LM architecture of the installed transformers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


#: set even where the default is None: model code that reads them without deriving them (a None head_dim, key/value
#: head count or expert count would not build)
_EVEN_IF_NONE = frozenset({"head_dim", "num_key_value_heads", "n_routed_experts", "num_experts", "num_local_experts",
                           "num_experts_per_tok"})


def _plain_attribute(default: Any, name: str) -> tuple[bool, Any]:
    """(whether ``name`` is a plain attribute of ``default``, its value): properties and per-layer attributes
    that refuse a global value are left alone."""
    import inspect

    if isinstance(inspect.getattr_static(type(default), name, None), property):
        return False, None
    try:
        return hasattr(default, name), getattr(default, name, None)
    except Exception:  # noqa: BLE001 - e.g. an attribute that varies per layer
        return False, None


def _overrides(default: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, tiny in _SIZES.items():
        present, current = _plain_attribute(default, name)
        number = isinstance(current, (int, float)) and not isinstance(current, bool)
        if present and (number or (current is None and name in _EVEN_IF_NONE)):
            values[name] = tiny
    for name, tiny in _TOKENS.items():
        if isinstance(_plain_attribute(default, name)[1], int):
            values[name] = tiny
    if isinstance(_plain_attribute(default, "kv_lora_rank")[1], int) and "num_key_value_heads" in values:
        values["num_key_value_heads"] = values.get("num_attention_heads", 4)  # latent attention: one kv head per query
    if _plain_attribute(default, "is_decoder")[1] is False:  # a causal LM head over an encoder-style stack
        values["is_decoder"] = True
    present, types = _plain_attribute(default, "layer_types")
    if present and isinstance(types, (list, tuple)) and types:
        kinds = list(dict.fromkeys(str(t) for t in types))
        layers = int(values.get("num_hidden_layers", len(types)))
        if set(kinds) == {_FULL, _SLIDING}:
            values["layer_types"] = [_SLIDING, _FULL][:layers] if layers >= 2 else [_SLIDING]
        else:
            values["layer_types"] = [kinds[i % len(kinds)] for i in range(layers)]
    return values


def tiny_config(config_class: type, **overrides: Any) -> Any:
    """``config_class`` with its defaults shrunk (sub-configs too; a sub-config that does not build alone is
    passed as a dict of its tiny values); ``overrides`` last."""
    default = config_class()
    values = _overrides(default)
    for key, sub_class in (getattr(config_class, "sub_configs", None) or {}).items():
        sub = getattr(default, key, None)
        if sub is None or not isinstance(sub_class, type):
            continue
        try:
            values[key] = tiny_config(type(sub))
        except Exception:  # noqa: BLE001
            values[key] = _overrides(sub)
    return config_class(**{**values, **overrides})


def build(model_type: str, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides: Any) -> torch.nn.Module:
    """The tiny ``model_type`` causal LM in eval mode, weights from ``seed`` (the global random state is kept),
    never stopping at an EOS id; ``overrides``: config values on top of the tiny ones."""
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = tiny_config(CONFIG_MAPPING[model_type], **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = None
    return model.to(dtype).eval()


def prompts(vocab: int = VOCAB, seed: int = 3,
            lengths: tuple[int, ...] = PROMPT_LENGTHS) -> tuple[torch.Tensor, torch.Tensor]:
    """A left-padded batch ``(input_ids, attention_mask)`` of prompts of ``lengths`` tokens (ids 3..vocab-1)."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = torch.randint(3, vocab, (n,), generator=gen)
        mask[row, width - n:] = 1
    return ids, mask


def save_word_tokenizer(folder: Any, vocab_size: int = VOCAB) -> None:
    """Save a word-level tokenizer beside a tiny model (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3, then
    ``w4 .. w<vocab_size - 1>``), so that frameworks that load a tokenizer from the folder (LMDeploy) find one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i for i in range(4, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                            pad_token="<pad>").save_pretrained(folder)
