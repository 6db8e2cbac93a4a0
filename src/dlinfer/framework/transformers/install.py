"""install()/uninstall(): the global registrations and the per-model switch to dlinfer."""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from .attention import ATTENTION_NAME, dlinfer_attention, dlinfer_mask, pop_cache, push_cache
from .compat import cache_kwarg, get_cache
from .experts import EXPERTS_NAME, check_experts, dlinfer_experts
from .modules import FAMILIES, Family, replace_modules, restore_modules
from .paged_cache import PagedCache

__all__ = ["install", "installed", "new_cache", "uninstall"]


@dataclass
class _ModelState:
    """What install(model) changed, to put back."""

    options: dict[str, Any]
    attn_implementation: Any
    experts_implementation: Any
    swapped: list[tuple[nn.Module, type]]
    handles: list[RemovableHandle] = field(default_factory=list)
    had_generate: bool = False
    set_experts: bool = False


_MODELS: weakref.WeakKeyDictionary[nn.Module, _ModelState] = weakref.WeakKeyDictionary()
_GLOBAL = {"installed": False}


def _interfaces() -> tuple[Any, Any, Any]:
    from transformers.integrations.moe import ExpertsInterface
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    return AttentionInterface, AttentionMaskInterface, ExpertsInterface


def _install_global() -> None:
    attention, mask, experts = _interfaces()
    attention.register(ATTENTION_NAME, dlinfer_attention)
    mask.register(ATTENTION_NAME, dlinfer_mask)
    experts.register(EXPERTS_NAME, dlinfer_experts)
    _GLOBAL["installed"] = True


def _uninstall_global() -> None:
    attention, mask, experts = _interfaces()
    attention._global_mapping.pop(ATTENTION_NAME, None)
    mask._global_mapping.pop(ATTENTION_NAME, None)
    experts._global_mapping.pop(EXPERTS_NAME, None)
    _GLOBAL["installed"] = False


def _head_layout(config: Any) -> tuple[int, int, int]:
    """(num_q_heads, num_kv_heads, head_dim), or a one-line error for a layout the paged attention lacks."""
    name = getattr(config, "model_type", type(config).__name__)
    if getattr(config, "kv_lora_rank", None) or getattr(config, "q_lora_rank", None):
        raise ValueError(f"dlinfer: {name} uses multi-head latent attention (MLA), unsupported by the paged cache")
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    if heads % kv_heads:
        raise ValueError(f"dlinfer: {name} has {heads} query heads, not a multiple of its {kv_heads} key/value heads")
    v_dim = getattr(config, "v_head_dim", None)
    if v_dim is not None and int(v_dim) != head_dim:
        raise ValueError(f"dlinfer: {name} has value head_dim {v_dim} != key head_dim {head_dim}, unsupported")
    layer_types = getattr(config, "layer_types", None) or []
    sliding = any(t != "full_attention" for t in layer_types) or (
        getattr(config, "use_sliding_window", True) and getattr(config, "sliding_window", None) is not None
        and not layer_types)
    if sliding:
        raise ValueError(f"dlinfer: {name} uses sliding-window or non-full attention layers, unsupported")
    return heads, kv_heads, head_dim


def _check_modules(model: nn.Module, head_dim: int, heads: int, kv_heads: int) -> None:
    for module in model.modules():
        q, k = getattr(module, "q_proj", None), getattr(module, "k_proj", None)
        if not (isinstance(q, nn.Linear) and isinstance(k, nn.Linear) and hasattr(module, "head_dim")):
            continue
        if module.head_dim != head_dim or q.out_features != heads * head_dim or k.out_features != kv_heads * head_dim:
            raise ValueError(
                f"dlinfer: {type(module).__name__} head_dim mismatch: head_dim {module.head_dim}, q_proj"
                f" {q.out_features} and k_proj {k.out_features} outputs for {heads}/{kv_heads} heads of {head_dim}")


def new_cache(model: nn.Module, batch_size: int, total_len: int) -> PagedCache:
    """A :class:`PagedCache` for ``batch_size`` sequences of up to ``total_len`` tokens, with the options
    ``install(model, ...)`` was given."""
    state = _MODELS.get(model)
    if state is None:
        raise RuntimeError("dlinfer: this model is not installed (call dlinfer.framework.transformers.install(model))")
    opts = state.options
    if total_len > opts["max_seq_len"]:
        raise ValueError(f"dlinfer paged cache: {total_len} tokens (prompt + max_new_tokens) exceed the cache's"
                         f" max_seq_len {opts['max_seq_len']}")
    config = model.config
    heads, kv_heads, head_dim = _head_layout(config)
    block_size = opts["block_size"]
    num_blocks = opts["num_blocks"] or batch_size * math.ceil(total_len / block_size)
    param = next(model.parameters())
    return PagedCache(num_layers=int(config.num_hidden_layers), num_kv_heads=kv_heads, head_dim=head_dim,
                      batch_size=batch_size, num_blocks=num_blocks, block_size=block_size, dtype=param.dtype,
                      device=param.device, max_seq_len=opts["max_seq_len"], kv_quant_bits=opts["kv_quant_bits"],
                      shuffle_seed=opts["shuffle_seed"])


def _generate_total(model: nn.Module, prompt_len: int, kwargs: dict[str, Any]) -> int:
    gen = kwargs.get("generation_config") or model.generation_config
    new = kwargs.get("max_new_tokens", getattr(gen, "max_new_tokens", None))
    if new is not None:
        return prompt_len + int(new)
    return max(prompt_len + 1, int(kwargs.get("max_length") or getattr(gen, "max_length", prompt_len + 1)))


def _prompt(args: tuple, kwargs: dict[str, Any]) -> Tensor:
    ids = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
    if ids is None and kwargs.get("inputs_embeds") is not None:
        ids = kwargs["inputs_embeds"][..., 0]
    if not isinstance(ids, Tensor) or ids.ndim != 2:
        raise ValueError("dlinfer generate: pass the prompt as a (batch, length) input_ids tensor")
    return ids


def _make_generate(model: nn.Module) -> Any:
    ref = weakref.ref(model)

    def generate(*args: Any, **kwargs: Any) -> Any:
        m = ref()
        assert m is not None
        if get_cache(kwargs) is None:
            batch, prompt_len = _prompt(args, kwargs).shape
            kwargs[cache_kwarg(m)] = new_cache(m, batch, _generate_total(m, prompt_len, kwargs))
        return type(m).generate(m, *args, **kwargs)

    return generate


def _pre_forward(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """Before the base model's forward: give it a PagedCache (a fresh one when it has none) and make that the
    cache the mask function prepares."""
    cache = get_cache(kwargs)
    if not isinstance(cache, PagedCache):
        if cache is not None and cache.get_seq_length() > 0:
            raise ValueError(f"dlinfer: an installed model needs a PagedCache, got a filled {type(cache).__name__}")
        x = args[0] if args else kwargs.get("input_ids")
        if x is None:
            x = kwargs["inputs_embeds"]
        owner = _owner_of(module)
        cache = new_cache(owner, int(x.shape[0]), int(x.shape[1]))
        name = next((n for n in ("cache", "past_key_values") if n in kwargs), None) or cache_kwarg(module)
        kwargs[name] = cache
    push_cache(cache)
    return args, kwargs


def _post_forward(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
    cache = get_cache(kwargs)
    if isinstance(cache, PagedCache):
        pop_cache(cache)


def _owner_of(base: nn.Module) -> nn.Module:
    for model in list(_MODELS.keys()):
        if model is base or getattr(model, "base_model", None) is base:
            return model
    raise RuntimeError("dlinfer: forward hook on a model that is not installed")


def install(model: nn.Module | None = None, *, block_size: int = 16, num_blocks: int | None = None,
            kv_quant_bits: int = 0, max_seq_len: int | None = None, shuffle_seed: int | None = None) -> None:
    """Register the ``"dlinfer"`` attention, mask and experts implementations with transformers (global part);
    with ``model``: swap its RMSNorm, gated MLP, router, attention and decoder-layer classes for dlinfer's,
    switch its attention (and experts) implementation to ``"dlinfer"`` and make ``model.generate()`` and
    ``model(...)`` run over a :class:`PagedCache` of ``block_size``-token blocks (``num_blocks`` per cache,
    default: enough for the batch; ``kv_quant_bits=8``: int8 cache; ``shuffle_seed``: shuffled free list;
    ``max_seq_len``: default ``config.max_position_embeddings``)."""
    _install_global()
    if model is None:
        return
    if model in _MODELS:
        raise RuntimeError("dlinfer: this model is already installed (uninstall(model) first)")
    if block_size <= 0:
        raise ValueError(f"dlinfer: block_size must be positive, got {block_size}")
    if kv_quant_bits not in (0, 8):
        raise ValueError(f"dlinfer: kv_quant_bits must be 0 or 8, got {kv_quant_bits}")
    config = model.config
    heads, kv_heads, head_dim = _head_layout(config)
    family: Family | None = FAMILIES.get(getattr(config, "model_type", ""))
    if family is None:
        raise ValueError(f"dlinfer: model type {getattr(config, 'model_type', None)!r} is not supported"
                         f" (supported: {', '.join(sorted(FAMILIES))})")
    _check_modules(model, head_dim, heads, kv_heads)
    base = getattr(model, "base_model", None)
    if not isinstance(base, nn.Module) or base is model:
        raise ValueError(f"dlinfer: {type(model).__name__} has no inner base model to hook")
    experts = [m for m in model.modules() if family.experts and type(m).__name__ == family.experts]
    for m in experts:
        check_experts(m)
    options = dict(block_size=block_size, num_blocks=num_blocks, kv_quant_bits=kv_quant_bits,
                   max_seq_len=int(max_seq_len or getattr(config, "max_position_embeddings", 4096)),
                   shuffle_seed=shuffle_seed)
    state = _ModelState(options=options, attn_implementation=config._attn_implementation,
                        experts_implementation=getattr(config, "_experts_implementation", None),
                        swapped=replace_modules(model, family), had_generate="generate" in model.__dict__)
    _MODELS[model] = state
    config._attn_implementation = ATTENTION_NAME
    if experts:
        config._experts_implementation = EXPERTS_NAME
        state.set_experts = True
    state.handles.append(base.register_forward_pre_hook(_pre_forward, with_kwargs=True))
    state.handles.append(base.register_forward_hook(_post_forward, with_kwargs=True, always_call=True))
    model.generate = _make_generate(model)


def uninstall(model: nn.Module | None = None) -> None:
    """Put ``model`` back exactly as it was before :func:`install` (classes, attention and experts
    implementations, hooks, ``generate``); without ``model``: every installed model, then the global
    registrations."""
    if model is None:
        for m in list(_MODELS.keys()):
            uninstall(m)
        _uninstall_global()
        return
    state = _MODELS.pop(model, None)
    if state is None:
        return
    for handle in state.handles:
        handle.remove()
    restore_modules(state.swapped)
    model.config._attn_implementation = state.attn_implementation
    if state.set_experts:
        model.config._experts_implementation = state.experts_implementation
    if not state.had_generate:
        model.__dict__.pop("generate", None)


def installed(model: nn.Module) -> bool:
    """Whether ``model`` is installed."""
    return model in _MODELS



