"""Class replacements: dlinfer forwards for RMSNorm, the gated MLP, the MoE router, the attention block and the
decoder layer, chosen per model family by class name and checked by structure.

A replacement is a subclass of the model's own class (``Dlinfer<Name>``) whose ``forward`` calls dlinfer ops;
:func:`replace_modules` swaps the ``__class__`` of a model's module instances (weights untouched) and
:func:`restore_modules` swaps them back, so models that are not installed stay stock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

import dlinfer.ops as ops

from .attention import ATTENTION_NAME
from .compat import get_cache

__all__ = ["FAMILIES", "Family", "replace_modules", "restore_modules"]


@dataclass(frozen=True)
class Family:
    """Class names of one transformers model family (``None``: the family has no such module)."""

    norm: str
    mlp: str | None
    attention: str
    decoder: str
    router: str | None = None
    experts: str | None = None
    #: the router casts its top-k weights to the logits' dtype (Qwen3-MoE) or keeps float32 (Mixtral)
    router_casts: bool = True


#: config.model_type -> family
FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaRMSNorm", "LlamaMLP", "LlamaAttention", "LlamaDecoderLayer"),
    "qwen2": Family("Qwen2RMSNorm", "Qwen2MLP", "Qwen2Attention", "Qwen2DecoderLayer"),
    "qwen3": Family("Qwen3RMSNorm", "Qwen3MLP", "Qwen3Attention", "Qwen3DecoderLayer"),
    "qwen3_moe": Family("Qwen3MoeRMSNorm", "Qwen3MoeMLP", "Qwen3MoeAttention", "Qwen3MoeDecoderLayer",
                        router="Qwen3MoeTopKRouter", experts="Qwen3MoeExperts"),
    "mixtral": Family("MixtralRMSNorm", None, "MixtralAttention", "MixtralDecoderLayer",
                      router="MixtralTopKRouter", experts="MixtralExperts", router_casts=False),
}


# -- the replacement forwards ------------------------------------------------------------------------------------
class RMSNormMixin:
    """``rms_norm``."""

    weight: Tensor
    variance_epsilon: float

    def forward(self, hidden_states: Tensor) -> Tensor:
        return ops.rms_norm(hidden_states, self.weight, self.variance_epsilon)


class GatedMLPMixin:
    """``down(silu_and_mul([gate(x) | up(x)]))``."""

    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(ops.silu_and_mul(torch.cat((self.gate_proj(x), self.up_proj(x)), dim=-1)))


class RouterMixin:
    """Router logits, then ``moe_gating_topk_softmax``: returns ``(logits, top-k weights, top-k ids)``."""

    weight: Tensor
    top_k: int
    hidden_dim: int
    _dlinfer_renormalize: bool
    _dlinfer_casts: bool

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logits = F.linear(hidden_states.reshape(-1, self.hidden_dim), self.weight)
        weights, ids = ops.moe_gating_topk_softmax(logits, self.top_k, self._dlinfer_renormalize)
        return logits, weights.to(logits.dtype) if self._dlinfer_casts else weights, ids


class AttentionMixin:
    """q/k/v projections (and Qwen3's q/k norms), ``apply_rotary_pos_emb``, the configured attention function,
    the output projection. Under another attention implementation than ``"dlinfer"`` the stock forward runs."""

    config: Any
    head_dim: int
    scaling: float
    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    o_proj: nn.Linear

    def forward(self, hidden_states: Tensor, position_embeddings: tuple[Tensor, Tensor] | None = None,
                attention_mask: Any = None, **kwargs: Any) -> tuple[Tensor, None]:
        if self.config._attn_implementation != ATTENTION_NAME:
            return super().forward(hidden_states=hidden_states,  # type: ignore[misc]
                                   position_embeddings=position_embeddings, attention_mask=attention_mask, **kwargs)
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        input_shape = hidden_states.shape[:-1]
        shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape)
        k = self.k_proj(hidden_states).view(shape)
        v = self.v_proj(hidden_states).view(shape)
        q_norm, k_norm = getattr(self, "q_norm", None), getattr(self, "k_norm", None)
        if q_norm is not None and k_norm is not None:
            q, k = q_norm(q), k_norm(k)
        cos, sin = position_embeddings  # type: ignore[misc]
        q, k = ops.apply_rotary_pos_emb(q, k, cos, sin)
        attention = ALL_ATTENTION_FUNCTIONS[ATTENTION_NAME]
        out, _ = attention(self, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attention_mask,
                           scaling=self.scaling, cache=get_cache(kwargs))
        return self.o_proj(out.reshape(*input_shape, -1)), None


class DecoderLayerMixin:
    """Pre-norm decoder layer with the residual add fused into the post-attention norm (``add_rms_norm``)."""

    input_layernorm: nn.Module
    post_attention_layernorm: nn.Module
    self_attn: nn.Module
    mlp: nn.Module

    def forward(self, hidden_states: Tensor, attention_mask: Any = None, position_ids: Tensor | None = None,
                use_cache: bool | None = False, position_embeddings: tuple[Tensor, Tensor] | None = None,
                **kwargs: Any) -> Tensor:
        residual = hidden_states
        hidden_states, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                          attention_mask=attention_mask, position_ids=position_ids,
                                          use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
        norm = self.post_attention_layernorm
        hidden_states, residual = ops.add_rms_norm(hidden_states, residual, norm.weight, norm.variance_epsilon)
        return residual + self.mlp(hidden_states)


# -- structure checks ---------------------------------------------------------------------------------------------
def _is_rms_norm(m: nn.Module) -> bool:
    return isinstance(getattr(m, "weight", None), Tensor) and hasattr(m, "variance_epsilon")


def _is_gated_mlp(m: nn.Module) -> bool:
    act = getattr(getattr(m, "config", None), "hidden_act", None)
    return (all(isinstance(getattr(m, n, None), nn.Linear) for n in ("gate_proj", "up_proj", "down_proj"))
            and act in ("silu", "swish"))


def _is_router(m: nn.Module) -> bool:
    return isinstance(getattr(m, "weight", None), Tensor) and hasattr(m, "top_k") and hasattr(m, "hidden_dim")


def _is_attention(m: nn.Module) -> bool:
    return (all(isinstance(getattr(m, n, None), nn.Linear) for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
            and hasattr(m, "head_dim") and hasattr(m, "layer_idx"))


def _is_decoder(m: nn.Module) -> bool:
    return all(hasattr(m, n) for n in ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")) and \
        _is_rms_norm(m.post_attention_layernorm)


_KINDS: dict[str, tuple[type, Callable[[nn.Module], bool]]] = {
    "norm": (RMSNormMixin, _is_rms_norm),
    "mlp": (GatedMLPMixin, _is_gated_mlp),
    "router": (RouterMixin, _is_router),
    "attention": (AttentionMixin, _is_attention),
    "decoder": (DecoderLayerMixin, _is_decoder),
}
_CLASSES: dict[tuple[type, type], type] = {}


def _replacement(cls: type, mixin: type) -> type:
    key = (cls, mixin)
    if key not in _CLASSES:
        _CLASSES[key] = type(f"Dlinfer{cls.__name__}", (mixin, cls), {"_dlinfer_original": cls})
    return _CLASSES[key]


def replace_modules(model: nn.Module, family: Family) -> list[tuple[nn.Module, type]]:
    """Swap the class of every module of ``model`` named in ``family`` (that passes its structure check) for
    its dlinfer replacement; returns ``(module, original class)`` pairs for :func:`restore_modules`."""
    by_name = {getattr(family, kind): kind for kind in _KINDS if getattr(family, kind) is not None}
    swapped: list[tuple[nn.Module, type]] = []
    for module in model.modules():
        cls = type(module)
        kind = by_name.get(cls.__name__)
        if kind is None:
            continue
        mixin, check = _KINDS[kind]
        if not check(module):
            continue
        if kind == "router":
            module._dlinfer_renormalize = bool(getattr(module, "norm_topk_prob", True))
            module._dlinfer_casts = family.router_casts
        module.__class__ = _replacement(cls, mixin)
        swapped.append((module, cls))
    return swapped


def restore_modules(swapped: list[tuple[nn.Module, type]]) -> None:
    """Undo :func:`replace_modules`."""
    for module, cls in swapped:
        module.__class__ = cls
        for attr in ("_dlinfer_renormalize", "_dlinfer_casts"):
            module.__dict__.pop(attr, None)
