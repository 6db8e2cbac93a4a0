"""Expand a :class:`~diopi.conformance.spec.Config` into case specs, and build a spec's inputs.

An ``op`` config expands into :class:`CaseSpec` entries, one per (shape group, dtype, params, layout) and, with
``inplace``, the same again for the in-place overload. ``call`` and ``from_forward`` configs expand into the same
specs, but each is a *recipe*: ``gen`` runs it and stores every recorded operator call as a case, so their count
is known only once data exists.

Ids are ``<function>/<nnnn>``, numbered over the function's ``op`` configs in order (recorded cases follow, numbered
by ``gen``); the values of a case are drawn from a generator seeded by its id, so the same id gives the same
values in every run. Combinations a dtype cannot take (``special`` or ``probability`` values on an integer dtype,
an in-place overload whose result cannot be written into its input) are left out, always the same way.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from diopi.conformance.spec import Config, Values

#: The storage offset of an ``offset`` layout view.
OFFSET = 3


class ConfigError(ValueError):
    """A config that cannot be expanded or bound; the message names the function and the key at fault."""


@dataclass(frozen=True)
class CaseSpec:
    """One case (``op`` configs) or recipe (``call``/``from_forward`` configs) of a config."""

    id: str
    function: str
    config: Config
    shapes: tuple[Any, ...]
    dtype: torch.dtype
    params: tuple[tuple[str, Any], ...]
    layout: str
    inplace: bool = False
    #: How the case is made: ``"op"`` (one call), ``"call"`` or ``"from_forward"`` (a recipe whose recorded
    #: calls of ``function`` are the cases; ``config`` is then the config that is run: the forward function's).
    mode: str = "op"
    #: The config of ``function`` itself, where ``config`` is another function's (``from_forward``).
    source: Config | None = None

    @property
    def own_config(self) -> Config:
        """The config of ``function`` (its tolerance and stats apply)."""
        return self.source or self.config

    @property
    def seed(self) -> int:
        """The seed of this case's input values, derived from its id."""
        return zlib.crc32(self.id.encode()) & 0x7FFFFFFF

    @property
    def call_seed(self) -> int:
        """The seed of the global generator when the case runs (a random function's draws). It differs from
        :attr:`seed`: with the same seed, ``bernoulli`` would compare its inputs with the very uniform numbers
        they were drawn from and return only zeros."""
        return (self.seed * 2654435761 + 12345) & 0x7FFFFFFF

    @property
    def op_name(self) -> str | None:
        """The overload this case calls (the in-place one for an in-place case); None for recipes."""
        return self.config.inplace if self.inplace else self.config.op

    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)


def resolve_op(name: str) -> torch._ops.OpOverload:
    """``"add.Tensor"``, ``"aten.add.Tensor"``, ``"aten::add.Tensor"``, ``"diopi::rms_norm.default"`` or ``"add"``
    (the default overload) -> the OpOverload; ValueError when torch has none."""
    from diopi.registry import _CUSTOM_NAMESPACES

    text = name.replace("::", ".")
    parts = text.split(".")
    if parts[0] not in ("aten",) and not (len(parts) >= 2 and hasattr(torch.ops, parts[0])
                                          and parts[0] in _CUSTOM_NAMESPACES):
        parts = ["aten", *parts]
    if len(parts) == 2:
        parts.append("default")
    if len(parts) != 3:
        raise ValueError(f"operator {name!r}: expected '[namespace::]name.overload'")
    namespace, packet, overload = parts
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    except (AttributeError, RuntimeError):
        raise ValueError(f"operator {name!r}: torch has no {namespace}::{packet}.{overload}") from None


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, torch.Size)) and all(isinstance(s, int) for s in value)


def _check_group(config: Config, group: tuple[Any, ...]) -> None:
    for (name, inp), shape in zip(config.inputs.items(), group, strict=True):
        if inp.list_of:
            shapes = [shape] * inp.list_of if _is_shape(shape) else shape
            if not isinstance(shapes, list) or len(shapes) != inp.list_of or not all(map(_is_shape, shapes)):
                raise ConfigError(f"{config.function}: shapes entry {group!r}: input {name!r} is a list of "
                                  f"{inp.list_of} tensors; give one shape or a list of {inp.list_of} shapes")
        elif not _is_shape(shape):
            raise ConfigError(f"{config.function}: shapes entry {group!r}: input {name!r} needs one shape "
                              f"(a tuple of ints), not {shape!r}")


def _groups(config: Config) -> list[tuple[Any, ...]]:
    if not config.inputs and not config.shapes:
        return [()]
    for group in config.shapes:
        _check_group(config, group)
    return list(config.shapes)


def dtype_allows(values: Values, dtype: torch.dtype) -> bool:
    """False for value kinds a dtype cannot take (special values or probabilities on integers and bool)."""
    if dtype.is_floating_point or dtype.is_complex:
        return True
    return values.kind not in ("special", "probability")


def _layout_applies(layout: str, config: Config, group: tuple[Any, ...]) -> bool:
    """A non-contiguous variant needs some input with a dimension of size > 1 (a 0-dim or empty input has no
    non-contiguous view)."""
    if layout != "noncontiguous":
        return True
    for inp, shape in zip(config.inputs.values(), group, strict=True):
        shapes = ([shape] * inp.list_of if _is_shape(shape) else shape) if inp.list_of else [shape]
        if any(_noncontiguous_dim(s) is not None for s in shapes):
            return True
    return False


def _noncontiguous_dim(shape: tuple[int, ...]) -> int | None:
    if any(s == 0 for s in shape):
        return None
    for dim in reversed(range(len(shape))):
        if shape[dim] > 1:
            return dim
    return None


def _param_products(config: Config) -> list[tuple[tuple[str, Any], ...]]:
    names = list(config.params)
    for name in names:
        if not isinstance(config.params[name], (list, tuple)) or not config.params[name]:
            raise ConfigError(f"{config.function}: params[{name!r}] must be a non-empty list of values")
    return [tuple(zip(names, values, strict=True)) for values in itertools.product(*(config.params[n] for n in names))]


def _combinations(config: Config) -> Iterator[tuple[tuple[Any, ...], torch.dtype, tuple[tuple[str, Any], ...], str]]:
    params = _param_products(config)
    for group in _groups(config):
        for dtype in config.dtypes:
            if not all(dtype_allows(inp.values or config.values, inp.dtype or dtype)
                       for inp in config.inputs.values()):
                continue
            if not config.inputs and not dtype_allows(config.values, dtype):
                continue
            for p in params:
                for layout in config.layouts:
                    if _layout_applies(layout, config, group):
                        yield group, dtype, p, layout


def expand(config: Config, start: int = 0, prefix: str = "") -> list[CaseSpec]:
    """The specs of ``config``, numbered from ``start``: cases of an ``op`` config (in-place cases after each
    out-of-place one), recipes of a ``call``/``from_forward`` config (``prefix`` ``"g"`` keeps their ids apart)."""
    specs: list[CaseSpec] = []
    number = start
    for group, dtype, params, layout in _combinations(config):
        variants = (False, True) if (config.op and config.inplace) else (False,)
        for inplace in variants:
            spec = CaseSpec(f"{config.function}/{prefix}{number:04d}", config.function, config, tuple(group), dtype,
                            params, layout, inplace)
            if inplace and not _inplace_allowed(spec):
                continue
            specs.append(spec)
            number += 1
    return specs


def _inplace_allowed(spec: CaseSpec) -> bool:
    """Whether the in-place overload takes this case: it is tried on meta tensors (no values needed); an overload
    without meta kernel is kept."""
    op = resolve_op(spec.config.inplace or "")
    shapes = {}
    for (name, inp), shape in zip(spec.config.inputs.items(), spec.shapes, strict=True):
        dtype = inp.dtype or spec.dtype
        if inp.list_of:
            each = [shape] * inp.list_of if _is_shape(shape) else shape
            shapes[name] = [torch.empty(s, dtype=dtype, device="meta") for s in each]
        else:
            shapes[name] = torch.empty(shape, dtype=dtype, device="meta")
    try:
        args, kwargs = bind(op, {**shapes, **_plain_params(spec)}, spec.function)
        op(*args, **kwargs)
    except ConfigError:
        raise
    except NotImplementedError:
        return True
    except Exception:
        return False
    return True


def _plain_params(spec: CaseSpec) -> dict[str, Any]:
    """Params without the ``"<input>=None"`` switches."""
    return {k: v for k, v in spec.params if not k.endswith("=None")}


def bind(op: torch._ops.OpOverload, values: dict[str, Any], function: str) -> tuple[list[Any], dict[str, Any]]:
    """Positional ``args`` and keyword-only ``kwargs`` for ``op`` from ``values`` by the schema's argument names;
    arguments not given take their defaults. A name the schema lacks, or a required argument not given, is a
    :class:`ConfigError` naming ``function`` and the argument."""
    schema = op._schema
    names = {a.name for a in schema.arguments}
    unknown = [k for k in values if k not in names]
    if unknown:
        raise ConfigError(f"{function}: {op} has no argument {unknown[0]!r} (its arguments: {sorted(names)})")
    positional = [a for a in schema.arguments if not a.kwarg_only]
    last = max((i for i, a in enumerate(positional) if a.name in values), default=-1)
    args: list[Any] = []
    for i, arg in enumerate(positional):
        if arg.name in values:
            args.append(values[arg.name])
        elif i < last or not arg.has_default_value():
            if not arg.has_default_value():
                raise ConfigError(f"{function}: {op} needs argument {arg.name!r}: give it in inputs or params")
            args.append(arg.default_value)
    kwargs = {a.name: values[a.name] for a in schema.arguments if a.kwarg_only and a.name in values}
    for arg in schema.arguments:
        if arg.kwarg_only and arg.name not in values and not arg.has_default_value():
            raise ConfigError(f"{function}: {op} needs keyword argument {arg.name!r}: give it in params")
    return args, kwargs


def _draw(values: Values, shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator,
          first_shape: tuple[int, ...] | None, function: str) -> torch.Tensor:
    """Contiguous values of ``shape``/``dtype`` drawn as ``values`` says."""
    kind, low, high = values.kind, values.low, values.high
    exact = not (dtype.is_floating_point or dtype.is_complex)
    if kind == "index":
        if isinstance(high, str):
            if not high.startswith("dim:") or first_shape is None:
                raise ConfigError(f"{function}: Values(kind='index', high={high!r}): expected 'dim:N' with a "
                                  f"first input")
            dim = int(high[4:])
            bound = first_shape[dim] if -len(first_shape) <= dim < len(first_shape) else 1
        else:
            bound = int(high if high is not None else 1)
        bound = max(1, bound)
        return torch.randint(int(low or 0), bound, shape, generator=gen, dtype=torch.int64).to(dtype)
    if isinstance(high, str):
        raise ConfigError(f"{function}: Values(kind={kind!r}) takes a number for high, not {high!r}")
    if dtype == torch.bool or kind == "bool":
        return torch.randint(0, 2, shape, generator=gen, dtype=torch.int64).to(dtype)
    if kind == "integer" or (exact and kind in ("normal", "uniform", "positive")):
        lo_default, hi_default = (1, 5) if kind == "positive" else (-5, 5)
        lo = int(low) if low is not None else lo_default
        hi = int(high) if high is not None else hi_default
        if dtype == torch.uint8 or not (dtype.is_signed or dtype.is_floating_point or dtype.is_complex):
            lo = max(lo, 0)
        hi = max(hi, lo + 1)
        return torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64).to(dtype)
    if kind == "normal":
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        if low is not None and high is not None:
            x = low + (high - low) * (x.clamp(-3, 3) + 3) / 6
    elif kind in ("uniform", "probability", "positive"):
        if kind == "positive":
            lo, hi = (0.1 if low is None else low), (4.0 if high is None else high)
        elif kind == "probability":
            lo, hi = 0.0, 1.0
        else:
            lo, hi = (0.0 if low is None else low), (1.0 if high is None else high)
        x = lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)
    elif kind == "special":
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
        pick = torch.randint(0, 4, shape, generator=gen) == 0
        which = torch.randint(0, len(specials), shape, generator=gen)
        x = torch.where(pick, specials[which], x)
    else:
        raise ConfigError(f"{function}: unknown value kind {kind!r}")
    return x.to(dtype)


def _place(values: torch.Tensor, layout: str, gap: torch.Tensor) -> torch.Tensor:
    """``values`` as the ``layout`` view; ``gap`` (1-D, same dtype, enough elements) fills the storage around it."""
    shape = tuple(values.shape)
    if layout == "offset":
        storage = gap[: values.numel() + OFFSET].clone()
        view = storage.as_strided(shape, _contiguous_stride(shape), OFFSET)
        view.copy_(values)
        return view
    dim = _noncontiguous_dim(shape) if layout == "noncontiguous" else None
    if dim is None:
        return values
    big_shape = list(shape)
    big_shape[dim] *= 2
    big = gap[: values.numel() * 2].clone().reshape(big_shape)
    index = [slice(None)] * len(shape)
    index[dim] = slice(None, None, 2)
    view = big[tuple(index)]
    view.copy_(values)
    return view


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(stride))


def make_tensor(values: Values, shape: tuple[int, ...], dtype: torch.dtype, layout: str, gen: torch.Generator,
                first_shape: tuple[int, ...] | None = None, function: str = "") -> torch.Tensor:
    """A tensor of ``shape``/``dtype`` with values drawn as ``values`` says, laid out as ``layout``."""
    t = _draw(values, shape, dtype, gen, first_shape, function)
    if layout == "contiguous":
        return t
    gap = _draw(values, (2 * math.prod(shape) + OFFSET,), dtype, gen, first_shape, function)
    return _place(t, layout, gap)


def build_inputs(spec: CaseSpec) -> dict[str, Any]:
    """The tensor inputs of ``spec`` by name (lists for ``list_of`` inputs, None for an input switched off by a
    ``"<name>=None"`` param), values seeded by the case id."""
    gen = torch.Generator().manual_seed(spec.seed)
    params = spec.param_dict()
    out: dict[str, Any] = {}
    first_shape: tuple[int, ...] | None = None
    for (name, inp), shape in zip(spec.config.inputs.items(), spec.shapes, strict=True):
        dtype = inp.dtype or spec.dtype
        values = inp.values or spec.config.values
        if inp.list_of:
            each = [shape] * inp.list_of if _is_shape(shape) else list(shape)
            out[name] = [make_tensor(values, tuple(s), dtype, spec.layout, gen, first_shape, spec.function)
                         for s in each]
        else:
            out[name] = make_tensor(values, tuple(shape), dtype, spec.layout, gen, first_shape, spec.function)
        if first_shape is None:
            first_shape = tuple(each[0]) if inp.list_of and each else tuple(shape) if not inp.list_of else ()
        if params.get(f"{name}=None"):
            out[name] = None
    return out


def build_call(spec: CaseSpec) -> tuple[torch._ops.OpOverload, list[Any], dict[str, Any]]:
    """The operator, positional args and kwargs of an ``op`` case."""
    if spec.op_name is None:
        raise ConfigError(f"{spec.id}: a {('call' if spec.config.call else 'from_forward')} recipe is not one "
                          f"operator call")
    op = resolve_op(spec.op_name)
    args, kwargs = bind(op, {**build_inputs(spec), **_plain_params(spec)}, spec.function)
    return op, args, kwargs


def expand_function(function: str, configs: list[Config],
                    configs_of: dict[str, list[Config]] | None = None) -> tuple[list[CaseSpec], list[CaseSpec]]:
    """``(cases, recipes)`` of one function: the cases of its ``op`` configs numbered in order, and recipes (ids
    ``<function>/g<nnnn>``) of its ``call`` configs and of its ``from_forward`` configs, whose recipes are the
    forward function's cases and recipes (from ``configs_of``) in the dtypes and layouts the config lists."""
    cases: list[CaseSpec] = []
    recipes: list[CaseSpec] = []
    for config in configs:
        if config.op:
            cases.extend(expand(config, len(cases)))
        elif config.call:
            recipes.extend(replace(s, mode="call") for s in expand(config, len(recipes), prefix="g"))
        else:
            forward = (configs_of or {}).get(config.from_forward or "")
            if not forward:
                raise ConfigError(f"{function}: from_forward names {config.from_forward!r}, which has no configs")
            if any(c.from_forward for c in forward):
                raise ConfigError(f"{function}: from_forward {config.from_forward!r} is itself a from_forward "
                                  f"function")
            fwd_cases, fwd_recipes = expand_function(config.from_forward or "", forward)
            for spec in (*fwd_cases, *fwd_recipes):
                if spec.inplace or spec.dtype not in config.dtypes or spec.layout not in config.layouts:
                    continue
                recipes.append(replace(spec, id=f"{function}/g{len(recipes):04d}", function=function,
                                       mode="from_forward", source=config))
    return cases, recipes
