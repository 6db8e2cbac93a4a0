"""The suite: every family's configs loaded and checked, selected by ``--functions`` and expanded into specs."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import diopi
from diopi.conformance.cases import CaseSpec, ConfigError, expand_function, resolve_op
from diopi.conformance.gen import resolve_call
from diopi.conformance.spec import Config
from diopi.functions import FAMILIES

CONFIG_PACKAGE = "diopi.conformance.configs"


@dataclass
class Suite:
    """Configs by DIOPI function, in family order, with the module each came from."""

    configs: dict[str, list[Config]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def functions(self) -> list[str]:
        return list(self.configs)

    def select(self, pattern: str | None) -> list[str]:
        """Functions whose name matches ``pattern`` (a whole-name regular expression, comma-separated entries
        allowed); ValueError when the pattern is malformed or matches nothing."""
        if not pattern:
            return self.functions()
        entries = [e.strip() for e in pattern.split(",") if e.strip()]
        try:
            regexes = [re.compile(e) for e in entries]
        except re.error as exc:
            raise ValueError(f"--functions {pattern!r}: not a regular expression ({exc})") from None
        chosen = [f for f in self.configs if any(r.fullmatch(f) for r in regexes)]
        if not chosen:
            raise ValueError(f"--functions {pattern!r} matches no function with conformance configs "
                             f"({len(self.configs)} have configs, e.g. {', '.join(list(self.configs)[:3])})")
        return chosen

    def expand(self, function: str) -> tuple[list[CaseSpec], list[CaseSpec]]:
        """``(cases, recipes)`` of ``function`` (see :func:`diopi.conformance.cases.expand_function`)."""
        try:
            return expand_function(function, self.configs[function], self.configs)
        except ConfigError as exc:
            raise ConfigError(f"{self.sources.get(function, CONFIG_PACKAGE)}: {exc}") from None


def _check(config: Config, source: str) -> None:
    where = f"{source}: {config.function}"
    try:
        fn = diopi.get_function(config.function)
    except diopi.UnknownFunctionError:
        raise ConfigError(f"{where}: function: no DIOPI function of that name") from None
    for key in ("op", "inplace"):
        name = getattr(config, key)
        if name is None:
            continue
        try:
            op = resolve_op(name)
        except ValueError as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from None
        owner = diopi.function_for_aten(op)
        if owner is None or owner.name != fn.name:
            raise ConfigError(f"{where}: {key}: {op} is served by {owner.name if owner else 'no DIOPI function'}, "
                              f"not {fn.name}")
    if not config.from_forward:
        if config.inputs and not config.shapes:
            raise ConfigError(f"{where}: shapes: empty; give at least one shape group for inputs {list(config.inputs)}")
        for key in config.params:
            if key.endswith("=None") and key[:-5] not in config.inputs:
                raise ConfigError(f"{where}: params: {key!r} names no input (inputs: {list(config.inputs)})")
    if config.call:
        try:
            resolve_call(config)
        except (ImportError, AttributeError, ValueError):
            raise ConfigError(f"{where}: call: {config.call!r} is not an importable callable") from None
    if config.from_forward:
        try:
            diopi.get_function(config.from_forward)
        except diopi.UnknownFunctionError:
            raise ConfigError(f"{where}: from_forward: no DIOPI function {config.from_forward!r}") from None


def load_suite(families: Iterable[str] = FAMILIES, extra: Iterable[Config] = ()) -> Suite:
    """Load ``CONFIGS`` of every family module that exists (a family without a module has no cases yet), plus
    ``extra`` configs (tests). A malformed config raises :class:`ConfigError` naming the module, the function and
    the key."""
    suite = Suite()
    sources: list[tuple[str, list[Config]]] = []
    for family in families:
        name = f"{CONFIG_PACKAGE}.{family}"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        except (ValueError, TypeError) as exc:  # a Config's own checks, raised while the module is built
            raise ConfigError(f"{name.replace('.', '/')}.py: {exc}") from None
        configs = getattr(module, "CONFIGS", None)
        if not isinstance(configs, list) or not all(isinstance(c, Config) for c in configs):
            raise ConfigError(f"{module.__file__}: CONFIGS must be a list of diopi.conformance.spec.Config")
        sources.append((str(module.__file__), configs))
    sources.append(("<extra configs>", list(extra)))
    for source, configs in sources:
        for config in configs:
            _check(config, source)
            suite.configs.setdefault(config.function, []).append(config)
            suite.sources.setdefault(config.function, source)
    return suite


def family_of(function: str) -> str:
    return diopi.get_function(function).family
