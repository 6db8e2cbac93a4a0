"""What the paged cache cannot hold, found before anything is swapped: one line naming the config field or the
module (class and attribute). The rest of what a model may do that the paged attention does not is refused when
it happens, by the mask and attention functions (a mask kind other than causal/sliding, sinks, extra keywords)."""

from __future__ import annotations

from typing import Any

from torch import nn

from .configs import config_value as _get
from .configs import text_config

__all__ = ["refusal"]

_LAYER_KINDS = {"full_attention", "sliding_attention"}


def _config_refusal(config: Any, what: str) -> str | None:
    if _get(config, "kv_lora_rank", None) or _get(config, "q_lora_rank", None):
        return f"{what} uses multi-head latent attention (MLA: config.kv_lora_rank/q_lora_rank), unsupported by the" \
               " paged cache"
    if _get(config, "add_cross_attention", False):
        return f"{what} has cross-attention (config.add_cross_attention), unsupported by the paged cache"
    if _get(config, "is_causal", True) is False or _get(config, "use_bidirectional_attention", False):
        field = "is_causal=False" if _get(config, "is_causal", True) is False else "use_bidirectional_attention"
        return f"{what} attends bidirectionally (config.{field}), unsupported by the paged attention"
    if _get(config, "attention_chunk_size", None):
        return f"{what} uses chunked attention (config.attention_chunk_size), unsupported by the paged attention"
    other = sorted({str(t) for t in _get(config, "layer_types", None) or ()} - _LAYER_KINDS)
    if other:
        return f"{what} has {', '.join(other)} layers (config.layer_types); the paged cache holds full_attention and" \
               " sliding_attention layers"
    heads, kv_heads = _get(config, "num_attention_heads", None), _get(config, "num_key_value_heads", None)
    if isinstance(heads, int) and isinstance(kv_heads, int) and kv_heads and heads % kv_heads:
        return f"{what} has {heads} query heads, not a multiple of its {kv_heads} key/value heads"
    v_dim, head_dim = _get(config, "v_head_dim", None), _get(config, "head_dim", None)
    if isinstance(v_dim, int) and isinstance(head_dim, int) and v_dim != head_dim:
        return f"{what} has value head_dim {v_dim} != key head_dim {head_dim} (config.v_head_dim), unsupported"
    return None


def _module_refusal(model: nn.Module) -> str | None:
    for path, module in model.named_modules():
        attr = path.rsplit(".", 1)[-1]
        owner = type(module).__name__
        lowered = attr.lower()
        if "cross" in lowered and "att" in lowered or lowered == "encoder_attn":
            return f"{owner} at {path} is cross-attention, unsupported by the paged cache"
        for name, _ in module.named_parameters(recurse=False):
            if name == "sinks":
                return f"{owner}.sinks: attention sinks, unsupported by the paged attention"
    return None


def refusal(model: nn.Module) -> str | None:
    """Why ``model`` cannot run over the paged cache, as one line starting ``dlinfer:``; None if nothing static."""
    config = getattr(model, "config", None)
    if config is None:
        return f"dlinfer: {type(model).__name__} has no config"
    what = str(_get(config, "model_type", None) or type(model).__name__)
    if _get(config, "is_encoder_decoder", False):
        return f"dlinfer: {what} is an encoder-decoder model (config.is_encoder_decoder), unsupported by the paged" \
               " cache"
    text = text_config(model)
    reasons = [_config_refusal(cfg, what) for cfg in ((config,) if text is config else (config, text))]
    reason = next((r for r in reasons if r), None) or (_module_refusal(model) if isinstance(model, nn.Module) else None)
    return f"dlinfer: {reason}" if reason else None
