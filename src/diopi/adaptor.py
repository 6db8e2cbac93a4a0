"""The DIOPI adaptor: conversion rules from a vendor's YAML config applied around its kernels, as the seeds'
DIOPI adaptor does for a chip that lacks a dtype or a memory format.

A config (``convert_config.yaml`` next to the vendor's implementation)::

    all:                          # rules for every function
      dtypes: {int64: int32, float64: float32}
    functions:                    # per function: a DIOPI name or a whole-name regular expression
      diopiConvolution2d:
        memory_format: channels_last
      diopi(Sort|Topk):
        dtypes: {}                # an exception: no dtype conversion here
      diopiIndexSelect:
        keep: [index]             # arguments passed as they are
    exclude: [diopiNonzero]       # functions called without any conversion

A function's rule is ``all`` with the keys of every matching ``functions`` entry laid over it, in file order.
Around a call, tensor inputs (and ``dtype`` arguments) of a converted dtype are cast, tensors are put in the
rule's ``memory_format`` (``contiguous``, ``channels_last`` for 4-d and 5-d tensors, ``keep``); the kernel runs on
those; in-place and ``out=`` arguments are written back into the caller's tensors; results come back in the
dtype and layout the operator gives for the caller's own arguments (found by running it on the meta device;
where it has no meta kernel, converted dtypes are cast back and 4-d/5-d results take the first input's layout).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from diopi.case_format import CaseFormatError, dtype_from_name
from diopi.impl import written_arguments
from diopi.registry import DiopiFunction, Kernel, functions, operator_packet
from diopi.tensor_walk import tensors_in
from diopi.yaml_config import load_yaml_mapping

__all__ = ["MEMORY_FORMATS", "AdaptedImpl", "AdaptorConfig", "AdaptorConfigError", "Rule", "adapt", "load_config"]

MEMORY_FORMATS = ("keep", "contiguous", "channels_last")
TOP_KEYS = ("all", "functions", "exclude")
RULE_KEYS = ("dtypes", "memory_format", "keep")


class AdaptorConfigError(ValueError):
    """A malformed adaptor config: the message names the file, the function and the key."""


@dataclass(frozen=True)
class Rule:
    """The conversions around one function's kernel."""

    dtypes: Mapping[torch.dtype, torch.dtype] = field(default_factory=dict)
    memory_format: str = "keep"
    keep: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.dtypes and self.memory_format == "keep"


@dataclass(frozen=True)
class AdaptorConfig:
    """A validated config: rule keys for all functions, per-pattern rule keys, excluded patterns."""

    path: str
    common: Mapping[str, Any]
    functions: tuple[tuple[re.Pattern[str], Mapping[str, Any]], ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()

    def rule_for(self, function: str) -> Rule:
        """The rule for DIOPI function ``function`` (empty when excluded)."""
        if any(p.fullmatch(function) for p in self.exclude):
            return Rule()
        keys = dict(self.common)
        for pattern, entry in self.functions:
            if pattern.fullmatch(function):
                keys.update(entry)
        return Rule(**keys)


# -- reading the config --------------------------------------------------------------------------------------------
def _fail(path: str, where: str, key: str | None, problem: str) -> AdaptorConfigError:
    return AdaptorConfigError(f"{path}: {where}" + (f": key {key!r}" if key else "") + f": {problem}")


def _dtype(text: Any, path: str, where: str) -> torch.dtype:
    try:
        return dtype_from_name(str(text).strip().removeprefix("torch."))
    except CaseFormatError:
        raise _fail(path, where, "dtypes", f"{text!r} is not a torch dtype (examples: int64, float32)") from None


def _rule_keys(raw: Any, path: str, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(path, where, None, f"expected a mapping with keys {', '.join(RULE_KEYS)}, got {raw!r}")
    keys: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "dtypes":
            if not isinstance(value, dict | None):
                raise _fail(path, where, key, f"expected a mapping such as {{int64: int32}}, got {value!r}")
            casts = {_dtype(s, path, where): _dtype(t, path, where) for s, t in (value or {}).items()}
            for source, target in casts.items():
                if target in casts:
                    raise _fail(path, where, key, f"{source} -> {target} but {target} is converted too")
            keys[key] = casts
        elif key == "memory_format":
            if value not in MEMORY_FORMATS:
                raise _fail(path, where, key, f"{value!r} is not one of {', '.join(MEMORY_FORMATS)}")
            keys[key] = value
        elif key == "keep":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(path, where, key, f"expected a list of argument names, got {value!r}")
            keys[key] = frozenset(value)
        else:
            raise _fail(path, where, key, f"unknown key (keys: {', '.join(RULE_KEYS)})")
    return keys


def _function_pattern(text: Any, path: str, where: str, key: str | None) -> re.Pattern[str]:
    """A DIOPI function name or whole-name regular expression that names at least one function."""
    try:
        pattern = re.compile(str(text))
    except re.error as exc:
        raise _fail(path, where, key, f"not a valid regular expression: {exc}") from None
    if not any(pattern.fullmatch(fn.name) for fn in functions()):
        raise _fail(path, where, key, "names no DIOPI function (a name such as diopiAdd, or a regular expression)")
    return pattern


def _check_keep(keep: frozenset[str] | tuple, pattern: re.Pattern[str], path: str, where: str) -> None:
    """Every ``keep`` name is an argument of some overload of the functions ``pattern`` names."""
    arguments: set[str] = set()
    for fn in functions():
        if pattern.fullmatch(fn.name):
            for packet in filter(None, map(operator_packet, fn.aten)):
                for overload in packet.overloads():
                    arguments.update(a.name for a in getattr(packet, overload)._schema.arguments)
    unknown = sorted(set(keep) - arguments)
    if unknown:
        raise _fail(path, where, "keep", f"{', '.join(map(repr, unknown))} is not an argument of its operators "
                                         f"(arguments: {', '.join(sorted(arguments))})")


def load_config(path: str | Path) -> AdaptorConfig:
    """Read and validate an adaptor config; a malformed one raises :class:`AdaptorConfigError` naming the file,
    the function and the key."""
    name = str(path)
    raw = load_yaml_mapping(path, what="adaptor config", sections=tuple(TOP_KEYS), error=AdaptorConfigError)
    per_function = raw.get("functions") or {}
    if not isinstance(per_function, dict):
        raise AdaptorConfigError(f"{name}: key 'functions': expected a mapping of function name -> rules")
    excluded = raw.get("exclude") or []
    if not isinstance(excluded, list):
        raise AdaptorConfigError(f"{name}: key 'exclude': expected a list of function names")
    entries = []
    for fn, rules in per_function.items():
        where = f"function {fn!r}"
        pattern, keys = _function_pattern(fn, name, where, None), _rule_keys(rules, name, where)
        _check_keep(keys.get("keep", ()), pattern, name, where)
        entries.append((pattern, keys))
    return AdaptorConfig(
        path=name,
        common=_rule_keys(raw.get("all"), name, "all"),
        functions=tuple(entries),
        exclude=tuple(_function_pattern(fn, name, f"function {fn!r}", "exclude") for fn in excluded),
    )


# -- converting around a call --------------------------------------------------------------------------------------
def _in_format(t: torch.Tensor, memory_format: str) -> torch.Tensor:
    if memory_format == "contiguous":
        return t.contiguous()
    if memory_format == "channels_last" and t.dim() in (4, 5):
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    return t


def _layout_of(t: torch.Tensor) -> torch.memory_format:
    """The memory format a 4-d or 5-d tensor is in (channels_last only when it is not also contiguous)."""
    if t.is_contiguous():
        return torch.contiguous_format
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.preserve_format


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to the leaves of plain lists and tuples."""
    if type(value) in (list, tuple):
        return type(value)(_map(v, fn) for v in value)
    return fn(value)


def _same(new: tuple, old: tuple) -> bool:
    """Whether conversion left every argument (and every item of a list argument) the same object."""
    pairs = zip(new, old, strict=True)
    return all(n is o or (type(n) in (list, tuple) and _same(tuple(n), tuple(o))) for n, o in pairs)


def _on_meta(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    """What ``op`` returns for these arguments, computed on the meta device (None where it cannot be)."""
    def meta(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        return v

    meta_kwargs = {k: ("meta" if k == "device" else _map(v, meta)) for k, v in kwargs.items()}
    try:
        return op(*_map(args, meta), **meta_kwargs)
    except Exception:  # no meta kernel, a data-dependent shape: fall back to the rules' inverse
        return None


def _restore(result: Any, expected: Any, back: dict[int, torch.Tensor], undo: dict[torch.dtype, torch.dtype],
             like: torch.Tensor | None) -> Any:
    """A kernel result as the caller expects it: the caller's own tensor for a written argument, else in the
    dtype and layout of ``expected`` (a meta result), else with the dtype conversions undone."""
    if isinstance(result, torch.Tensor):
        if id(result) in back:
            return back[id(result)]
        if isinstance(expected, torch.Tensor):
            same_shape = result.shape == expected.shape
            if same_shape and (result.dtype, result.stride()) != (expected.dtype, expected.stride()):
                out = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype)
                return out.copy_(result)
            return result.to(expected.dtype)
        result = result.to(undo.get(result.dtype, result.dtype))
        if like is not None and result.dim() == like.dim() and result.dim() in (4, 5):
            layout = _layout_of(like)
            if layout is not torch.preserve_format:
                result = result.contiguous(memory_format=layout)
        return result
    if isinstance(result, (list, tuple)):
        matching = isinstance(expected, (list, tuple)) and len(expected) == len(result)
        wanted = expected if matching else [None] * len(result)
        items = [_restore(r, e, back, undo, like) for r, e in zip(result, wanted, strict=True)]
        return items if isinstance(result, list) else type(result)(items)
    return result


def _adapted_kernel(kernel: Kernel, rule: Rule, op: torch._ops.OpOverload) -> Kernel:
    positions, keyword_written = written_arguments(op)
    arg_names = [a.name for a in op._schema.arguments]
    written_names = {arg_names[i] for i in positions} | set(keyword_written)

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _in_format(value.to(rule.dtypes.get(value.dtype, value.dtype)), rule.memory_format)
        if isinstance(value, torch.dtype):
            return rule.dtypes.get(value, value)
        return value

    def adapted(o: Any, *args: Any, **kwargs: Any) -> Any:
        names = [arg_names[i] if i < len(arg_names) else "" for i in range(len(args))]
        new_args = tuple(a if n in rule.keep else _map(a, convert) for n, a in zip(names, args, strict=True))
        new_kwargs = {k: (v if k in rule.keep else _map(v, convert)) for k, v in kwargs.items()}
        if _same(new_args, args) and _same(tuple(new_kwargs.values()), tuple(kwargs.values())):
            return kernel(o, *args, **kwargs)  # nothing to convert in this call
        expected = _on_meta(o, args, kwargs)
        result = kernel(o, *new_args, **new_kwargs)
        back: dict[int, torch.Tensor] = {}
        written = [(args[i], new_args[i]) for i in positions if i < len(args)]
        written += [(kwargs[k], new_kwargs[k]) for k in kwargs if k in written_names]
        for caller, converted in written:
            for mine, theirs in zip(tensors_in(caller), tensors_in(converted), strict=True):
                if theirs is not mine:
                    mine.copy_(theirs)
                back[id(theirs)] = mine
        originals = tensors_in(list(args) + list(kwargs.values()))
        undo = {t: s for s, t in rule.dtypes.items() if any(x.dtype == s for x in originals)}
        like = next((t for t in originals if t.dim() in (4, 5)), None)
        return _restore(result, expected, back, undo, like)

    return adapted


class AdaptedImpl:
    """An implementation whose kernels run behind an adaptor config; other attributes are the wrapped one's."""

    def __init__(self, impl: Any, config: AdaptorConfig) -> None:
        self.base = impl
        self.config = config
        self.name: str = impl.name

    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        kernel = self.base.kernel(fn, op)
        if kernel is None:
            return None
        rule = self.config.rule_for(fn.name)
        return kernel if rule.empty else _adapted_kernel(kernel, rule, op)

    def __getattr__(self, name: str) -> Any:
        if name == "base":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    def __repr__(self) -> str:
        return f"AdaptedImpl({self.base!r}, {self.config.path!r})"


def adapt(impl: Any, config: AdaptorConfig | str | Path) -> AdaptedImpl:
    """``impl`` with its kernels wrapped by the conversions of ``config`` (a loaded config or a YAML path)."""
    return AdaptedImpl(impl, config if isinstance(config, AdaptorConfig) else load_config(config))
