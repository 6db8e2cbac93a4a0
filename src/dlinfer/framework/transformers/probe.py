"""The probe: does a candidate module class compute, with a dlinfer forward, what its own forward computes?

1. Group the model's modules by class; each class that fits a kind (candidates.py) is a candidate.
2. For classes without a cached verdict, run one stock forward of the model on a few token ids (``use_cache=False``,
   attention through a recording function registered as ``"dlinfer_probe"``: plain causal attention that notes the
   query, key, value and keywords each module hands it) and keep the inputs of the first call of each candidate
   class.
3. Per class, with the module's weights moved by seeded noise (fresh weights are often degenerate: norm weights
   of 1 make ``2 * w`` equal ``1 + w``), run its own forward and each of the kind's variants in order (the
   instance's class swapped) on the recorded inputs and judge the outputs with ``diopi.compare`` (the project's
   comparison engine; a float64 copy of the stock module, float32 for 16-bit models, gives the noise floor when
   the plain tolerance is not met); for attention also what the module hands the attention function (query, key,
   value, scaling, dropout, sliding window, softcap, sinks). The first variant that passes is the class's
   verdict; none: the class stays stock, with the reason.
4. Verdicts are cached per (class, kind, config, dtype, device type): a class is probed once per configuration.
   Instances of a class whose plain settings differ (``is_sliding``, ``with_scale``, ...; not ``layer_idx``) may
   compute differently: each such group is probed (and reported) on its own.

Decoder layers are probed after norms: the fused ``add_rms_norm`` needs the post-attention norm's class replaced.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

from diopi.compare import all_passed, compare_outputs
from diopi.tensor_walk import map_leaves

from . import fused
from .candidates import Kind, Variant, eps_of, kind_of
from .configs import restore, switch

__all__ = ["PROBE_NAME", "ClassVerdict", "Plan", "plan", "replacement_class"]

PROBE_NAME = "dlinfer_probe"
PROBE_TOKENS = 5
#: what an attention module hands the attention function that changes its result
_COMPARED = ("scaling", "dropout", "sliding_window", "softcap", "s_aux")
_RECORDS: dict[int, dict[str, Any]] = {}
_VERDICTS: dict[tuple[tuple, str, str], tuple[Variant | None, str]] = {}
#: settings that differ between layers without changing what a module computes
_PER_LAYER = frozenset({"layer_idx", "training", "layer_id", "layer_number"})
_CLASSES: dict[tuple[type, type], type] = {}
# probing order: a decoder's verdict reads its post-attention norm's
_ORDER = ("norm", "router", "mlp", "experts", "attention", "decoder")


@dataclass
class ClassVerdict:
    """The verdict of one module class (or one group of its instances with other settings) of a model."""

    name: str            # class name (with the settings that tell its groups apart)
    kind: str
    instances: int
    variant: str | None  # the dlinfer forward it gets, None: kept stock
    reason: str          # why kept stock, or how it was judged


@dataclass
class Plan:
    """What install() swaps: ``(module, replacement class, settings)``, experts modules switched by config."""

    swaps: list[tuple[nn.Module, type, dict[str, Any]]] = field(default_factory=list)
    experts: list[nn.Module] = field(default_factory=list)
    verdicts: list[ClassVerdict] = field(default_factory=list)


@dataclass
class _Record:
    """The first call of a group's module in the capture forward: its inputs."""

    module: nn.Module
    args: tuple
    kwargs: dict[str, Any]


def replacement_class(cls: type, mixin: type) -> type:
    """``Dlinfer<Name>``: ``mixin`` over ``cls`` (one class per pair)."""
    key = (cls, mixin)
    if key not in _CLASSES:
        _CLASSES[key] = type(f"Dlinfer{cls.__name__}", (mixin, cls), {"_dlinfer_original": cls})
    return _CLASSES[key]


def probe_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                    scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """The recording attention function: notes what ``module`` passes, returns plain causal attention."""
    _RECORDS[id(module)] = {"query": query, "key": key, "value": value, "scaling": scaling,
                            "dropout": dropout or None, **{k: kwargs.get(k) for k in _COMPARED[2:]}}
    groups = max(1, query.shape[1] // key.shape[1])
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    causal = query.shape[2] == key.shape[2] and query.shape[2] > 1
    out = F.scaled_dot_product_attention(query, key, value, is_causal=causal, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def _fingerprint(model: nn.Module) -> str:
    param = next(model.parameters(), None)
    where = f"{param.dtype}/{param.device.type}" if param is not None else "-"
    try:
        return where + model.config.to_json_string(use_diff=False)
    except (TypeError, ValueError, AttributeError):
        return where + json.dumps(repr(model.config))


def _clone(x: Any) -> Any:
    return map_leaves(x, lambda v: v.detach().clone() if isinstance(v, Tensor) else v)


def _cast(x: Any, dtype: torch.dtype) -> Any:
    return map_leaves(x, lambda v: v.to(dtype) if isinstance(v, Tensor) and v.is_floating_point() else v)


@contextlib.contextmanager
def _probing(model: nn.Module) -> Iterator[None]:
    """Attention of ``model`` through the recording function while the block runs."""
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(PROBE_NAME, probe_attention)
    saved = switch(model, "_attn_implementation_internal", PROBE_NAME)
    try:
        with torch.no_grad():
            yield
    finally:
        restore(saved, "_attn_implementation_internal")


def token_ids(model: nn.Module, count: int, seed: int) -> Tensor:
    """``(1, count)`` seeded random token ids within ``model``'s vocabulary, on its device."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    vocab = int(getattr(embeddings, "num_embeddings", 0) or getattr(model.config, "vocab_size", 0) or 2)
    ids = torch.randint(0, vocab, (1, count), generator=torch.Generator().manual_seed(seed))
    return ids.to(next(model.parameters()).device)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:200]


def _capture(model: nn.Module, keys: set[tuple]) -> tuple[dict[tuple, _Record], str | None]:
    """One stock forward on ``PROBE_TOKENS`` ids; the first call of a module of each group in ``keys``."""
    records: dict[tuple, _Record] = {}

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        key = group_key(module)
        if key not in records:
            records[key] = _Record(module, _clone(args), _clone(kwargs))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in model.modules()
               if kind_of(m) is not None and group_key(m) in keys]
    ids = token_ids(model, PROBE_TOKENS, seed=0)
    try:
        with _probing(model):
            model(input_ids=ids, use_cache=False)
    except Exception as exc:  # the model needs more than token ids: nothing can be probed
        return records, f"a stock forward on token ids raised {type(exc).__name__}: {_first_line(exc)}"
    finally:
        for h in handles:
            h.remove()
        _RECORDS.clear()
    return records, None


def _settings(module: nn.Module, kind: str, variant: Variant, offset_norms: dict[tuple, bool]) -> dict[str, Any]:
    settings = dict(variant.settings)
    if kind == "norm":
        settings["_dlinfer_eps"] = eps_of(module)
    elif kind == "attention":
        settings.update(fused.attention_settings(module))
    elif kind == "decoder":
        norm = module.post_attention_layernorm
        settings["_dlinfer_eps"] = eps_of(norm)
        settings["_dlinfer_offset"] = offset_norms[group_key(norm)]
    return settings


@contextlib.contextmanager
def _swapped(module: nn.Module, mixin: type, settings: dict[str, Any]) -> Iterator[None]:
    """``module`` with its replacement class and settings while the block runs."""
    original = type(module)
    module.__class__ = replacement_class(original, mixin)
    module.__dict__.update(settings)
    try:
        yield
    finally:
        module.__class__ = original
        for key in settings:
            module.__dict__.pop(key, None)


def _call(model: nn.Module, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``module(*args, **kwargs)`` with the recording attention: (output, what it passed the attention function)."""
    try:
        with _probing(model):
            out = module(*args, **kwargs)
        return out, _RECORDS.pop(id(module), None)
    finally:
        _RECORDS.clear()  # the records of the modules inside it too: they hold the probe's device tensors


def _run(model: nn.Module, kind: str, module: nn.Module, variant: Variant, settings: dict[str, Any],
         record: _Record) -> tuple[Any, dict[str, Any] | None]:
    """The variant's (output, attention call) on the record's inputs."""
    if kind == "experts":
        from .experts import EXPERTS_NAME

        saved = switch(model, "_experts_implementation_internal", EXPERTS_NAME)
        try:
            return _call(model, module, record.args, record.kwargs)
        finally:
            restore(saved, "_experts_implementation_internal")
    assert variant.mixin is not None
    with _swapped(module, variant.mixin, settings):
        return _call(model, module, record.args, record.kwargs)


def _reference(model: nn.Module, module: nn.Module, record: _Record) -> tuple[Any, dict[str, Any] | None]:
    """The stock module in float64 (float32 for 16-bit models) on the same inputs: the noise floor's reference."""
    param = next(module.parameters(), None)
    dtype = torch.float64 if param is None or param.dtype == torch.float32 else torch.float32
    with _probing(model):  # the copy's config keeps the recording attention
        twin = copy.deepcopy(module).to(dtype)
    return _call(model, twin, _cast(record.args, dtype), _cast(record.kwargs, dtype))


def _qkv(call: dict[str, Any] | None) -> list[Any]:
    return [call[k] for k in ("query", "key", "value")] if call else []


def _keywords(call: dict[str, Any] | None) -> dict[str, Any]:
    return {k: call.get(k) for k in _COMPARED} if call else {}


@contextlib.contextmanager
def _perturbed(module: nn.Module) -> Iterator[None]:
    """``module``'s floating-point weights moved by seeded noise while the block runs, then put back exactly:
    freshly initialised weights are often degenerate (norm weights all 1, where ``2 * w`` equals ``1 + w``)."""
    gen = torch.Generator().manual_seed(1)
    saved = []
    with torch.no_grad():
        for param in module.parameters():
            if not param.is_floating_point():
                continue
            saved.append((param, param.detach().clone()))
            scale = float(param.detach().float().abs().mean()) * 0.5 + 0.1
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * scale
            param.add_(noise.to(param.device, param.dtype))
    try:
        yield
    finally:
        with torch.no_grad():
            for param, original in saved:
                param.copy_(original)


def _judge(model: nn.Module, kind: str, module: nn.Module, variant: Variant, settings: dict[str, Any],
           record: _Record) -> str | None:
    """None when the variant computes what the module's own forward does on the recorded inputs (weights
    perturbed), else why not (one line)."""
    with _perturbed(module):
        expected, expected_call = _call(model, module, record.args, record.kwargs)
        try:
            out, call = _run(model, kind, module, variant, settings, record)
        except Exception as exc:
            return f"{variant.name} raised {type(exc).__name__}: {_first_line(exc)}"
        if kind == "attention":
            ours, theirs = _keywords(call), _keywords(expected_call)
            if ours != theirs:
                differ = [k for k in _COMPARED if ours.get(k) != theirs.get(k)]
                return f"passes the attention function other {', '.join(differ)} than its own forward"
        actual, wanted = [out, _qkv(call)], [expected, _qkv(expected_call)]
        results = compare_outputs(actual, wanted)
        if all_passed(results):
            return None
        try:
            ref_out, ref_call = _reference(model, module, record)
        except Exception:  # noqa: BLE001 - no higher-precision copy: the plain tolerance's verdict stands
            ref_out, ref_call = None, None
    if ref_out is not None:
        results = compare_outputs(actual, wanted, expected_fp64=[ref_out, _qkv(ref_call)])
        if all_passed(results):
            return None
    failed = next(r for r in results if not all_passed([r]))
    return f"{variant.name} differs: {failed.message}"[:240]


def _probe_group(model: nn.Module, kind: Kind, record: _Record | None,
                 offset_norms: dict[tuple, bool]) -> tuple[Variant | None, str]:
    module = record.module if record else None
    if module is None:
        return None, "not called by a forward on token ids"
    if kind.name == "decoder" and group_key(module.post_attention_layernorm) not in offset_norms:
        return None, f"its post_attention_layernorm ({type(module.post_attention_layernorm).__name__}) is kept stock"
    reasons = []
    for variant in kind.variants(module):
        why = _judge(model, kind.name, module, variant, _settings(module, kind.name, variant, offset_norms), record)
        if why is None:
            return variant, "matches its own forward on the probe input"
        reasons.append(why)
    return None, reasons[0] if len(reasons) == 1 else "; ".join(dict.fromkeys(reasons))


def group_key(module: nn.Module) -> tuple:
    """``(class, plain attributes)``: instances of a class that differ in a setting (a sliding layer's
    ``is_sliding``, a norm's ``with_scale``) may compute differently, so each setting is probed once."""
    plain = tuple(sorted((k, v) for k, v in vars(module).items() if not k.startswith("_") and k not in _PER_LAYER
                         and (v is None or isinstance(v, (bool, int, float, str)))))
    return type(module), plain


def _label(key: tuple, keys: list[tuple]) -> str:
    """The class name, with the settings that tell its groups apart when it has several."""
    cls, plain = key
    siblings = [dict(k[1]) for k in keys if k[0] is cls]
    if len(siblings) < 2:
        return cls.__name__
    differ = [(k, v) for k, v in plain if len({str(s.get(k)) for s in siblings}) > 1]
    return f"{cls.__name__}[{', '.join(f'{k}={v}' for k, v in differ)}]"


def plan(model: nn.Module) -> Plan:
    """Probe ``model``'s candidate module groups (cached verdicts reused) and return what to swap."""
    groups: dict[tuple, tuple[Kind, list[nn.Module]]] = {}
    for module in model.modules():
        if getattr(type(module), "_dlinfer_original", None) is not None:
            raise RuntimeError(f"dlinfer: {type(module).__name__} is already replaced (is the model installed?)")
        kind = kind_of(module)
        if kind is None:
            continue
        key = group_key(module)
        groups.setdefault(key, (kind, []))[1].append(module)
    fingerprint = _fingerprint(model)
    todo = {key for key, (kind, _) in groups.items() if (key, kind.name, fingerprint) not in _VERDICTS}
    records: dict[tuple, _Record] = {}
    failure = None
    if todo:
        records, failure = _capture(model, todo)
    result = Plan()
    offset_norms: dict[tuple, bool] = {}
    keys = list(groups)
    for kind_name in _ORDER:
        for key, (kind, instances) in groups.items():
            if kind.name != kind_name:
                continue
            cache_key = (key, kind.name, fingerprint)
            if cache_key not in _VERDICTS:
                if failure is not None:
                    verdict: tuple[Variant | None, str] = (None, failure)
                else:
                    verdict = _probe_group(model, kind, records.get(key), offset_norms)
                _VERDICTS[cache_key] = verdict
            variant, reason = _VERDICTS[cache_key]
            result.verdicts.append(ClassVerdict(_label(key, keys), kind.name, len(instances),
                                                variant.name if variant else None, reason))
            if variant is None:
                continue
            if kind.name == "norm":
                offset_norms[key] = variant.mixin is fused.OffsetRMSNormMixin
            if kind.name == "experts":
                result.experts.extend(instances)
                continue
            assert variant.mixin is not None
            for module in instances:
                result.swaps.append((module, replacement_class(key[0], variant.mixin),
                                     _settings(module, kind.name, variant, offset_norms)))
    return result
