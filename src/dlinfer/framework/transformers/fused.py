"""The dlinfer forwards that replace a module's own, one mixin per computation.

A replacement class is ``type("Dlinfer<Name>", (Mixin, <the model's class>), ...)``: the mixin's ``forward``
calls dlinfer ops and reads the module's own weights; everything else is the model's class. Which modules get one
is not decided here (candidates.py finds modules by structure, probe.py checks each class's result against its own
forward). Per-instance settings the forwards read (``_dlinfer_eps``, ...) are set by the candidate's ``configure``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torch.nn.modules import module as _hooks
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from dlinfer.ops.library import call

from .attention import ATTENTION_NAME, attend_tokens, layer_context, token_rotary, unpacked
from .merged import merged_projection
from .paged_cache import PagedCache

__all__ = ["AttentionMixin", "DecoderLayerMixin", "FusedGatedMLPMixin", "GatedMLPMixin", "OWN_ATTENTION",
           "OffsetRMSNormMixin", "RMSNormMixin", "RouterMixin", "attention_settings", "attn_implementation",
           "norm_weight", "run"]

# the operators in their schema form (every argument positionally, ``call`` as op mode calls them): the mixins
# already hold their arguments in that form, so LMDeploy's call-form wrappers (dlinfer.ops) would only add calls
_RMS_NORM = torch.ops.dlinfer.rms_norm
_ADD_RMS_NORM = torch.ops.dlinfer.add_rms_norm
_ROTARY = torch.ops.dlinfer.apply_rotary_pos_emb
_SILU_AND_MUL = torch.ops.dlinfer.silu_and_mul
_MOE_GATING = torch.ops.dlinfer.moe_gating_topk_softmax


def run(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)``, through its ``forward`` directly when calling it would run nothing else (no
    hooks of its own or global ones, no JIT tracing or ``torch.compile``): ``Module.__call__``'s bookkeeping is
    skipped, never a hook."""
    if (_compiling() or module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
            or module._backward_pre_hooks or _hooks._global_forward_hooks or _hooks._global_forward_pre_hooks
            or _hooks._global_backward_hooks or _hooks._global_backward_pre_hooks or _tracing_state()):
        return module(*args, **kwargs)
    return module.forward(*args, **kwargs)


_tracing_state = torch._C._get_tracing_state


def attn_implementation(config: Any) -> Any:
    """``config._attn_implementation``: the stored value read directly (transformers' configs answer attribute reads
    through two Python ``__getattribute__`` layers, a few microseconds per layer and step), else the property."""
    if _compiling():  # dynamo traces the property (not object.__getattribute__)
        return config._attn_implementation
    stored = object.__getattribute__(config, "__dict__").get("_attn_implementation_internal", _MISSING)
    return config._attn_implementation if stored is _MISSING else stored


_MISSING = object()
_compiling = torch.compiler.is_compiling

#: attention implementations the replaced attention computes itself (dlinfer's, and the probe's recorder); under
#: any other the module's own forward runs
OWN_ATTENTION = {"dlinfer", "dlinfer_probe"}


def norm_weight(weight: Tensor, offset: bool) -> Tensor:
    """The weight ``rms_norm`` multiplies by: the module's, or ``1 + weight`` for norms stored as an offset (Gemma),
    computed in float32 as those norms do and cast back."""
    return (weight.float() + 1.0).to(weight.dtype) if offset else weight


class RMSNormMixin:
    """``weight * x / rms(x)``: ``rms_norm``."""

    weight: Tensor
    _dlinfer_eps: float

    def forward(self, hidden_states: Tensor) -> Tensor:
        return call(_RMS_NORM, hidden_states, self.weight, self._dlinfer_eps)


class OffsetRMSNormMixin:
    """``(1 + weight) * x / rms(x)`` (weights stored as an offset from 1): ``rms_norm``."""

    weight: Tensor
    _dlinfer_eps: float

    def forward(self, hidden_states: Tensor) -> Tensor:
        return call(_RMS_NORM, hidden_states, norm_weight(self.weight, True), self._dlinfer_eps)


class GatedMLPMixin:
    """``down(silu(gate(x)) * up(x))`` with separate gate and up projections: ``silu_and_mul``."""

    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear

    def forward(self, x: Tensor) -> Tensor:
        merged = merged_projection(self, ("gate_proj", "up_proj"))  # type: ignore[arg-type]
        if merged is None:
            gate_up = torch.cat((run(self.gate_proj, x), run(self.up_proj, x)), dim=-1)
        else:
            gate_up = F.linear(x, merged[0], merged[1])
        return run(self.down_proj, call(_SILU_AND_MUL, gate_up, -1))


class FusedGatedMLPMixin:
    """The same with one ``gate_up_proj`` (gate rows first, as Phi-3): ``silu_and_mul`` on its output."""

    gate_up_proj: nn.Linear
    down_proj: nn.Linear

    def forward(self, x: Tensor) -> Tensor:
        return run(self.down_proj, call(_SILU_AND_MUL, run(self.gate_up_proj, x), -1))


class RouterMixin:
    """Router logits, then ``moe_gating_topk_softmax``: ``(logits, top-k weights, top-k ids)``; the weights
    renormalized and cast to the logits' dtype or not, as the module's own forward does (``_dlinfer_*``)."""

    weight: Tensor
    top_k: int
    _dlinfer_renormalize: bool
    _dlinfer_casts: bool

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logits = F.linear(hidden_states.reshape(-1, self.weight.shape[-1]), self.weight)
        weights, ids = call(_MOE_GATING, logits, self.top_k, self._dlinfer_renormalize)
        return logits, weights.to(logits.dtype) if self._dlinfer_casts else weights, ids


class AttentionMixin:
    """q/k/v projections (per-head q/k norms if any), ``apply_rotary_pos_emb`` on the given ``(cos, sin)``, the
    cache's ``update``, the configured attention function with what the stock forward passes it (``scaling``,
    ``dropout``, ``sliding_window``, ``softcap``: read once per instance into ``_dlinfer_*`` settings), the output
    projection. Under an attention implementation other than dlinfer's, the module's own forward runs."""

    config: Any
    head_dim: int
    scaling: float
    layer_idx: int
    training: bool
    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    o_proj: nn.Linear
    _dlinfer_norms: tuple[nn.Module | None, nn.Module | None]
    _dlinfer_window: int | None
    _dlinfer_softcap: float | None
    _dlinfer_dropout: float

    def forward(self, hidden_states: Tensor, position_embeddings: tuple[Tensor, Tensor] | None = None,
                attention_mask: Any = None, **kwargs: Any) -> tuple[Tensor, Any]:
        implementation = attn_implementation(self.config)
        if implementation not in OWN_ATTENTION:
            return super().forward(hidden_states, position_embeddings=position_embeddings,  # type: ignore[misc]
                                   attention_mask=attention_mask, **kwargs)
        cache = kwargs.pop("cache", None)
        legacy = kwargs.pop("past_key_values", None)
        cache = legacy if cache is None else cache
        dropout = self._dlinfer_dropout if self.training else 0.0
        if implementation == ATTENTION_NAME and isinstance(cache, PagedCache):
            return self._dlinfer_paged(hidden_states, position_embeddings, attention_mask, cache, dropout, kwargs), None
        input_shape = hidden_states.shape[:-1]
        q, k, v = self._dlinfer_qkv(hidden_states, (*input_shape, -1, self.head_dim), None)
        cos, sin = position_embeddings  # type: ignore[misc]
        q, k = call(_ROTARY, q, k, cos, sin, None, None)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        out, weights = ALL_ATTENTION_FUNCTIONS[implementation](
            self, q, k, v, attention_mask, dropout=dropout, scaling=self.scaling, sliding_window=self._dlinfer_window,
            softcap=self._dlinfer_softcap, cache=cache, **kwargs)
        return run(self.o_proj, out.reshape(*input_shape, -1)), weights

    def _dlinfer_qkv(self, hidden_states: Tensor, shape: tuple[int, ...],
                     index: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values viewed as ``shape`` (its last two: heads, head_dim), the rows ``index`` of its
        first dimension only when given; per-head q/k norms applied."""
        head_dim = shape[-1]
        merged = merged_projection(self, ("q_proj", "k_proj", "v_proj"))  # type: ignore[arg-type]
        if merged is None:
            q, k, v = (run(proj, hidden_states).reshape(shape) for proj in (self.q_proj, self.k_proj, self.v_proj))
            if index is not None:
                q, k, v = q.index_select(0, index), k.index_select(0, index), v.index_select(0, index)
        else:  # one multiply, its output viewed as heads and split into the three projections' heads
            qkv = F.linear(hidden_states, merged[0], merged[1]).view(shape)
            if index is not None:
                qkv = qkv.index_select(0, index)
            sizes = merged[2]
            q, k, v = qkv.split_with_sizes((sizes[0] // head_dim, sizes[1] // head_dim, sizes[2] // head_dim), dim=-2)
        q_norm, k_norm = self._dlinfer_norms
        if q_norm is not None:
            q = run(q_norm, q)
        if k_norm is not None:
            k = run(k_norm, k)
        return q, k, v

    def _dlinfer_paged(self, hidden_states: Tensor, position_embeddings: tuple[Tensor, Tensor] | None,
                       attention_mask: Any, cache: PagedCache, dropout: float, kwargs: dict[str, Any]) -> Tensor:
        """The attention over the paged cache in token layout from the projections on (``(tokens, heads,
        head_dim)``, the step's real tokens only): no ``(batch, heads, len)`` transposes, padding dropped once."""
        batch, q_len = hidden_states.shape[0], hidden_states.shape[1]
        ctx, window = layer_context(self, attention_mask, cache, q_len, self._dlinfer_window, dropout, kwargs)
        rotary = token_rotary(*position_embeddings, ctx)  # type: ignore[misc]
        if rotary is not None:
            q, k, v = self._dlinfer_qkv(hidden_states, (batch * q_len, -1, self.head_dim), ctx.token_index)
            q, k = call(_ROTARY, q, k, rotary[0], rotary[1], None, None)
        else:  # cos/sin of another layout: rotated as (batch, q_len, heads, head_dim), then packed
            q, k, v = self._dlinfer_qkv(hidden_states, (batch, q_len, -1, self.head_dim), None)
            q, k = call(_ROTARY, q, k, *position_embeddings, None, None)  # type: ignore[misc]
            q, k, v = (x.reshape(batch * q_len, x.shape[2], x.shape[3]) for x in (q, k, v))
            if ctx.token_index is not None:
                q, k, v = (x.index_select(0, ctx.token_index) for x in (q, k, v))
        out = attend_tokens(type(self).__name__, q, k, v, ctx, cache, self.layer_idx, self.scaling, window,
                            self._dlinfer_softcap)
        return run(self.o_proj, unpacked(out, ctx).view(batch, q_len, -1))


def attention_settings(module: nn.Module) -> dict[str, Any]:
    """What :class:`AttentionMixin` reads of an attention module, once: its per-head q/k norms, the window and
    soft-capping it hands the attention function (its own ``sliding_window``, else the config's), its dropout."""
    window = module.sliding_window if hasattr(module, "sliding_window") else getattr(module.config, "sliding_window",
                                                                                       None)
    return {"_dlinfer_norms": (getattr(module, "q_norm", None), getattr(module, "k_norm", None)),
            "_dlinfer_window": window, "_dlinfer_softcap": getattr(module, "attn_logit_softcapping", None),
            "_dlinfer_dropout": float(getattr(module, "attention_dropout", 0.0) or 0.0)}


@functools.cache
def _positional_names(cls: type) -> tuple[str, ...]:
    """The names of ``cls.forward``'s parameters after ``hidden_states`` (to bind positional arguments)."""
    return tuple(inspect.signature(cls.forward).parameters)[2:]


class DecoderLayerMixin:
    """A pre-norm decoder layer, ``h = x + attn(norm1(x)); out = h + mlp(norm2(h))``, with the residual add fused
    into the post-attention norm: ``add_rms_norm``."""

    input_layernorm: nn.Module
    post_attention_layernorm: nn.Module
    self_attn: nn.Module
    mlp: nn.Module
    _dlinfer_original: type
    _dlinfer_eps: float
    _dlinfer_offset: bool

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if args:
            kwargs.update(zip(_positional_names(self._dlinfer_original), args, strict=False))
        residual = hidden_states
        attn = run(self.self_attn, run(self.input_layernorm, hidden_states), **kwargs)
        attn = attn[0] if isinstance(attn, tuple) else attn
        weight = self.post_attention_layernorm.weight
        if self._dlinfer_offset:
            weight = norm_weight(weight, True)  # type: ignore[arg-type]
        hidden_states, residual = call(_ADD_RMS_NORM, attn, residual, weight, self._dlinfer_eps)
        out = run(self.mlp, hidden_states)
        return residual + (out[0] if isinstance(out, tuple) else out)
