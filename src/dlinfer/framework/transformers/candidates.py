"""Which modules could take a dlinfer forward: found by structure (what a module holds), never by model type or
class name. A structure fit only makes a module class a candidate; probe.py decides by comparing results.

Each :class:`Kind` says what to look for and lists its :class:`Variant` forwards, tried in order:

- ``norm``: a 1-D ``weight``, an epsilon, nothing else -> ``rms_norm`` as ``weight * x / rms(x)``, or as
  ``(1 + weight) * x / rms(x)`` (weights stored as an offset, Gemma);
- ``mlp``: ``gate_proj``/``up_proj``/``down_proj`` Linears, or ``gate_up_proj``/``down_proj`` -> ``silu_and_mul``;
- ``router``: a 2-D ``weight`` (experts, hidden), ``top_k``, no submodule -> ``moe_gating_topk_softmax``
  (renormalized or not, weights cast or not);
- ``attention``: ``q_proj``/``k_proj``/``v_proj``/``o_proj`` Linears, ``head_dim``, ``layer_idx``, optional
  ``q_norm``/``k_norm`` -> ``apply_rotary_pos_emb`` and the configured attention function;
- ``decoder``: exactly ``input_layernorm``, ``self_attn``, ``post_attention_layernorm``, ``mlp`` (a post norm whose
  class is replaced) -> ``add_rms_norm`` for the residual add and the post-attention norm;
- ``experts``: transformers' experts interface (``gate_up_proj``/``down_proj`` 3-D weights) -> ``fused_moe``
  through the ``"dlinfer"`` experts implementation (a config switch, not a class swap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from . import fused

__all__ = ["KINDS", "Kind", "Variant", "eps_of", "kind_of"]


@dataclass(frozen=True)
class Variant:
    """One candidate forward: ``mixin`` (None: the experts config switch) and the per-instance settings."""

    name: str
    mixin: type | None
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    """A computation the adaptor can replace: ``fits(module)`` says why a module does not fit (None: it fits);
    ``variants(module)`` the forwards to try."""

    name: str
    fits: Callable[[nn.Module], str | None]
    variants: Callable[[nn.Module], list[Variant]]


def eps_of(module: nn.Module) -> float | None:
    """A norm's epsilon (``variance_epsilon``, ``eps`` or ``epsilon``)."""
    for attr in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(module, attr, None)
        if isinstance(value, float):
            return value
    return None


def _own_parameters(module: nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters(recurse=False)]


def _children_with_parameters(module: nn.Module) -> set[str]:
    return {name for name, child in module.named_children() if any(True for _ in child.parameters())}


def _linears(module: nn.Module, *names: str) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in names)


# -- norm ----------------------------------------------------------------------------------------------------------
def _norm_fits(m: nn.Module) -> str | None:
    weight = getattr(m, "weight", None)
    if not isinstance(weight, nn.Parameter) or weight.ndim != 1:
        return "no 1-D weight"
    if eps_of(m) is None:
        return "no epsilon"
    if _own_parameters(m) != ["weight"] or any(True for _ in m.children()) or getattr(m, "bias", None) is not None:
        return "holds more than a weight"
    return None


def _norm_variants(m: nn.Module) -> list[Variant]:
    return [Variant("rms_norm", fused.RMSNormMixin), Variant("rms_norm (1 + weight)", fused.OffsetRMSNormMixin)]


# -- gated MLP -----------------------------------------------------------------------------------------------------
def _mlp_fits(m: nn.Module) -> str | None:
    if _linears(m, "gate_proj", "up_proj", "down_proj") and \
            _children_with_parameters(m) == {"gate_proj", "up_proj", "down_proj"}:
        return None
    if _linears(m, "gate_up_proj", "down_proj") and _children_with_parameters(m) == {"gate_up_proj", "down_proj"}:
        return None
    return "no gate/up/down Linears"


def _mlp_variants(m: nn.Module) -> list[Variant]:
    if isinstance(getattr(m, "gate_up_proj", None), nn.Linear):
        return [Variant("silu_and_mul (fused gate_up)", fused.FusedGatedMLPMixin)]
    return [Variant("silu_and_mul", fused.GatedMLPMixin)]


# -- MoE router ----------------------------------------------------------------------------------------------------
def _router_fits(m: nn.Module) -> str | None:
    weight = getattr(m, "weight", None)
    if isinstance(m, nn.Linear) or not isinstance(weight, Tensor) or weight.ndim != 2:
        return "no 2-D router weight"
    if not isinstance(getattr(m, "top_k", None), int) or any(True for _ in m.children()):
        return "no top_k"
    if _own_parameters(m) != ["weight"] or list(m.buffers(recurse=False)):
        return "holds more than a weight"
    return None


def _router_variants(m: nn.Module) -> list[Variant]:
    declared = getattr(m, "norm_topk_prob", None)
    orders = [bool(declared), not declared] if isinstance(declared, bool) else [True, False]
    return [Variant(f"moe_gating_topk_softmax (renormalize={r}, cast={c})", fused.RouterMixin,
                    {"_dlinfer_renormalize": r, "_dlinfer_casts": c}) for r in orders for c in (True, False)]


# -- attention -----------------------------------------------------------------------------------------------------
def _attention_fits(m: nn.Module) -> str | None:
    if not _linears(m, "q_proj", "k_proj", "v_proj", "o_proj"):
        return "no q/k/v/o Linears"
    if not isinstance(getattr(m, "head_dim", None), int) or not isinstance(getattr(m, "layer_idx", None), int):
        return "no head_dim/layer_idx"
    if not isinstance(getattr(m, "scaling", None), float):
        return "no scaling"
    extra = _children_with_parameters(m) - {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"}
    if extra or _own_parameters(m):
        return f"holds more ({', '.join(sorted(extra)) or 'own parameters'})"
    return None


def _attention_variants(m: nn.Module) -> list[Variant]:
    return [Variant("apply_rotary_pos_emb + dlinfer attention", fused.AttentionMixin)]


# -- decoder layer -------------------------------------------------------------------------------------------------
_DECODER_PARTS = {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}


def _decoder_fits(m: nn.Module) -> str | None:
    if _children_with_parameters(m) != _DECODER_PARTS or _own_parameters(m):
        return "not exactly input_layernorm, self_attn, post_attention_layernorm, mlp"
    if _norm_fits(m.post_attention_layernorm) is not None:
        return "post_attention_layernorm is not an RMS-norm candidate"
    return None


def _decoder_variants(m: nn.Module) -> list[Variant]:
    return [Variant("add_rms_norm", fused.DecoderLayerMixin)]


# -- experts -------------------------------------------------------------------------------------------------------
def _experts_fits(m: nn.Module) -> str | None:
    if not hasattr(m, "is_concatenated") or not hasattr(m, "has_gate"):
        return "not an experts-interface module"
    from .experts import experts_layout_problem

    return experts_layout_problem(m)


def _experts_variants(m: nn.Module) -> list[Variant]:
    return [Variant("fused_moe", None)]


#: in the order a module is matched against (a module is one kind at most)
KINDS: tuple[Kind, ...] = (
    Kind("decoder", _decoder_fits, _decoder_variants),
    Kind("attention", _attention_fits, _attention_variants),
    Kind("experts", _experts_fits, _experts_variants),
    Kind("mlp", _mlp_fits, _mlp_variants),
    Kind("router", _router_fits, _router_variants),
    Kind("norm", _norm_fits, _norm_variants),
)


def kind_of(module: nn.Module) -> Kind | None:
    """The first kind ``module``'s structure fits, if any."""
    for kind in KINDS:
        if kind.fits(module) is None:
            return kind
    return None
