"""install()/uninstall(): the global registrations and the per-model switch to dlinfer.

``install(model)``:

1. refuse what the paged cache cannot hold (refusals.py): one-line ``ValueError``;
2. probe the model's candidate module classes (probe.py) and swap the classes that match for their dlinfer forward;
3. switch every config of the model to the ``"dlinfer"`` attention (and experts, when every experts class matched)
   implementation; hook the model's forward (a fresh :class:`PagedCache` when none is given; the running
   cache for the mask and attention functions; after the forward, the check that every layer that updated the
   cache ran the dlinfer attention) and wrap ``model.generate`` (a cache sized for prompt + new tokens);
4. run one short forward through the adaptor: what only shows when it runs (a mask kind, a keyword, a layer
   bypassing the attention interface) is refused now, and the model is put back.

``install()`` without a model registers the implementations and installs every model constructed afterwards
(construction.py); ``uninstall()`` undoes all of it.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from . import construction
from .attention import ATTENTION_NAME, dlinfer_attention, pop_cache, push_cache
from .compat import cache_kwarg, get_cache
from .configs import config_value, restore, switch, text_config
from .experts import EXPERTS_NAME, dlinfer_experts
from .mask import dlinfer_mask
from .paged_cache import PagedCache
from .probe import ClassVerdict, plan, token_ids
from .refusals import refusal

__all__ = ["install", "installed", "new_cache", "uninstall", "verdicts"]

TRIAL_TOKENS = 4


@dataclass
class _ModelState:
    """What install(model) changed, to put back."""

    options: dict[str, Any]
    num_layers: int
    verdicts: list[ClassVerdict]
    layer_windows: dict[int, int] = field(default_factory=dict)
    swapped: list[tuple[nn.Module, type, tuple[str, ...]]] = field(default_factory=list)
    saved_attention: list[tuple[Any, Any]] = field(default_factory=list)
    saved_experts: list[tuple[Any, Any]] = field(default_factory=list)
    handles: list[RemovableHandle] = field(default_factory=list)
    had_generate: bool = False


_MODELS: weakref.WeakKeyDictionary[nn.Module, _ModelState] = weakref.WeakKeyDictionary()


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


def _uninstall_global() -> None:
    attention, mask, experts = _interfaces()
    attention._global_mapping.pop(ATTENTION_NAME, None)
    mask._global_mapping.pop(ATTENTION_NAME, None)
    experts._global_mapping.pop(EXPERTS_NAME, None)


def _check_attention_shapes(model: nn.Module) -> None:
    """A q/k/v/o attention module whose projections disagree with its head_dim: one line naming it."""
    for path, module in model.named_modules():
        q, k, o = (getattr(module, n, None) for n in ("q_proj", "k_proj", "o_proj"))
        head_dim = getattr(module, "head_dim", None)
        if not (isinstance(q, nn.Linear) and isinstance(k, nn.Linear) and isinstance(head_dim, int) and head_dim):
            continue
        bad = q.out_features % head_dim or k.out_features % head_dim or (
            isinstance(o, nn.Linear) and o.in_features != q.out_features)
        if bad:
            raise ValueError(f"dlinfer: {type(module).__name__} head_dim mismatch at {path}: head_dim {head_dim},"
                             f" q_proj {q.out_features} and k_proj {k.out_features} outputs, o_proj"
                             f" {getattr(o, 'in_features', None)} inputs")


def _num_layers(model: nn.Module) -> int:
    """Cache layers: one past the largest ``layer_idx`` of the model's modules (else the config's layer count)."""
    indices = [m.layer_idx for m in model.modules() if isinstance(getattr(m, "layer_idx", None), int)]
    if indices:
        return max(indices) + 1
    return int(config_value(text_config(model), "num_hidden_layers") or 1)


def _cache_windows(model: nn.Module) -> dict[int, int]:
    """layer -> the sliding window stock's ``DynamicCache`` keeps for it (transformers' own reading of the config:
    ``get_layer_types_and_kwargs``); empty when the config does not say."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        config = model.config.get_text_config(decoder=True)
        types, kwargs = get_layer_types_and_kwargs(config)
    except Exception:  # noqa: BLE001 - an older transformers or a config it cannot read per layer
        return {}
    return {i: int(kw["sliding_window"]) for i, (kind, kw) in enumerate(zip(types, kwargs, strict=False))
            if kind == "sliding_attention" and isinstance(kw.get("sliding_window"), int)}


def new_cache(model: nn.Module, batch_size: int, total_len: int) -> PagedCache:
    """A :class:`PagedCache` for ``batch_size`` sequences of up to ``total_len`` tokens, with the options
    ``install(model, ...)`` was given (each layer's pools allocated at its first write, in its key layout). When the
    pool holds every sequence's ``total_len`` tokens, each sequence's blocks are reserved up front."""
    state = _MODELS.get(model)
    if state is None:
        raise RuntimeError("dlinfer: this model is not installed (call dlinfer.framework.transformers.install(model))")
    opts = state.options
    if total_len > opts["max_seq_len"]:
        raise ValueError(f"dlinfer paged cache: {total_len} tokens (prompt + max_new_tokens) exceed the cache's"
                         f" max_seq_len {opts['max_seq_len']}")
    block_size = opts["block_size"]
    num_blocks = opts["num_blocks"] or batch_size * math.ceil(total_len / block_size)
    param = next(model.parameters())
    cache = PagedCache(num_layers=state.num_layers, num_kv_heads=None, head_dim=None, batch_size=batch_size,
                       num_blocks=num_blocks, block_size=block_size, dtype=param.dtype, device=param.device,
                       max_seq_len=opts["max_seq_len"], kv_quant_bits=opts["kv_quant_bits"],
                       shuffle_seed=opts["shuffle_seed"])
    cache.layer_windows = dict(state.layer_windows)
    if num_blocks >= batch_size * cache.manager.blocks_for(total_len):
        # every sequence's blocks taken now, in pool order: each row of the block table is consecutive blocks and the
        # rows are evenly spaced, so attention kernels can read the cache in place (the same memory either way)
        cache.manager.reserve({b: total_len for b in range(batch_size)})
    return cache


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
    """Before the installed model's forward: give it a PagedCache (a fresh one when it has none) and make that the
    running cache."""
    cache = get_cache(kwargs)
    if not isinstance(cache, PagedCache):
        if cache is not None and cache.get_seq_length() > 0:
            raise ValueError(f"dlinfer: an installed model needs a PagedCache, got a filled {type(cache).__name__}")
        x = args[0] if args else kwargs.get("input_ids")
        if x is None:
            x = kwargs["inputs_embeds"]
        cache = new_cache(module, int(x.shape[0]), int(x.shape[1]))
        name = next((n for n in ("cache", "past_key_values") if n in kwargs), None) or cache_kwarg(module)
        kwargs[name] = cache
    push_cache(cache, owner=module)
    return args, kwargs


def _post_forward(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
    cache = get_cache(kwargs)
    if isinstance(cache, PagedCache):
        pop_cache(cache)
        cache.end_forward(check=output is not None)  # None: the forward raised, its own error is the one to see


def _trial(model: nn.Module) -> None:
    """One short forward through the adaptor (refusals that only show at run time). A model that computes with
    the attention mask itself (adds a bias to it, reads its dtype, ...) meets the step context there: refused."""
    ids = token_ids(model, TRIAL_TOKENS, seed=1)
    try:
        with torch.no_grad():
            model(input_ids=ids)
    except (TypeError, AttributeError) as exc:
        if "StepContext" not in str(exc):
            raise
        raise ValueError(f"dlinfer: {type(model).__name__} computes with the attention mask itself ({exc}), outside"
                         " transformers' mask and attention interfaces; unsupported by the paged attention") from None


def _options(block_size: int, num_blocks: int | None, kv_quant_bits: int, max_seq_len: int | None,
             shuffle_seed: int | None) -> dict[str, Any]:
    if block_size <= 0:
        raise ValueError(f"dlinfer: block_size must be positive, got {block_size}")
    if kv_quant_bits not in (0, 8):
        raise ValueError(f"dlinfer: kv_quant_bits must be 0 or 8, got {kv_quant_bits}")
    return dict(block_size=block_size, num_blocks=num_blocks, kv_quant_bits=kv_quant_bits, max_seq_len=max_seq_len,
                shuffle_seed=shuffle_seed)


def _install_model(model: nn.Module, options: dict[str, Any]) -> None:
    reason = refusal(model)
    if reason:
        raise ValueError(reason)
    _check_attention_shapes(model)
    positions = config_value(text_config(model), "max_position_embeddings")
    positions = positions if isinstance(positions, int) and positions > 0 else 4096
    options = dict(options, max_seq_len=int(options["max_seq_len"] or positions))
    found = plan(model)
    state = _ModelState(options=options, num_layers=_num_layers(model), verdicts=found.verdicts,
                        layer_windows=_cache_windows(model), had_generate="generate" in model.__dict__)
    for module, cls, settings in found.swaps:
        state.swapped.append((module, type(module), tuple(settings)))
        module.__class__ = cls
        module.__dict__.update(settings)
    _MODELS[model] = state
    state.saved_attention = switch(model, "_attn_implementation_internal", ATTENTION_NAME)
    kept_experts = any(v.kind == "experts" and v.variant is None for v in found.verdicts)
    if found.experts and not kept_experts:
        state.saved_experts = switch(model, "_experts_implementation_internal", EXPERTS_NAME)
    state.handles.append(model.register_forward_pre_hook(_pre_forward, with_kwargs=True))
    state.handles.append(model.register_forward_hook(_post_forward, with_kwargs=True, always_call=True))
    model.generate = _make_generate(model)
    try:
        _trial(model)
    except BaseException:
        uninstall(model)
        raise


def install(model: nn.Module | None = None, *, block_size: int = 16, num_blocks: int | None = None,
            kv_quant_bits: int = 0, max_seq_len: int | None = None, shuffle_seed: int | None = None) -> None:
    """Register the ``"dlinfer"`` attention, mask and experts implementations with transformers; with ``model``:
    probe and swap its module classes, switch it to dlinfer's implementations and make ``model.generate()`` and
    ``model(...)`` run over a :class:`PagedCache` of ``block_size``-token blocks (``num_blocks`` per cache, default:
    enough for the batch; ``kv_quant_bits=8``: int8 cache; ``shuffle_seed``: shuffled free list; ``max_seq_len``:
    default ``max_position_embeddings``). Without ``model``: every model constructed from now on is installed
    with these options at its first ``generate()`` or forward (see construction.py). One-line ``ValueError`` for
    a model the paged cache cannot serve."""
    options = _options(block_size, num_blocks, kv_quant_bits, max_seq_len, shuffle_seed)
    _install_global()
    if model is None:
        construction.enable(lambda m: install(m, **options))
        return
    if model in _MODELS:
        raise RuntimeError("dlinfer: this model is already installed (uninstall(model) first)")
    construction.disarm(model)
    _install_model(model, options)


def uninstall(model: nn.Module | None = None) -> None:
    """Put ``model`` back exactly as it was before :func:`install` (classes, implementations, hooks,
    ``generate``); without ``model``: every installed model, the construction hook, then the registrations."""
    if model is None:
        construction.disable()
        for m in list(_MODELS.keys()):
            uninstall(m)
        _uninstall_global()
        return
    construction.disarm(model)
    state = _MODELS.pop(model, None)
    if state is None:
        return
    for handle in state.handles:
        handle.remove()
    for module, cls, settings in state.swapped:
        module.__class__ = cls
        for key in settings:
            module.__dict__.pop(key, None)
    restore(state.saved_attention, "_attn_implementation_internal")
    restore(state.saved_experts, "_experts_implementation_internal")
    if not state.had_generate:
        model.__dict__.pop("generate", None)


def installed(model: nn.Module) -> bool:
    """Whether ``model`` is installed."""
    return model in _MODELS


def verdicts(model: nn.Module) -> list[ClassVerdict] | None:
    """The per-class verdicts of an installed model (None if it is not installed)."""
    state = _MODELS.get(model)
    return None if state is None else list(state.verdicts)
