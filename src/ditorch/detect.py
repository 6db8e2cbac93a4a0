"""Which vendor plugin to use: load the ``ditorch.adapters`` entry points, try them in order, pick one.

Order is deterministic: priority, then name. An adapter is *tried* when its plugin is installed: the
plugin is imported and the first one with a usable device wins; nothing usable means the CPU
(``None``). A plugin that is installed but fails to import, and an entry point that fails to load, are
recorded as failures (adapter name, error text) and detection goes on. ``DITORCH_VENDOR`` skips
detection: an unknown name or a failing plugin is then an error.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import NamedTuple

from ditorch.adapters.base import Adapter
from ditorch.config import DitorchConfig

GROUP = "ditorch.adapters"
CPU = "cpu"

# Per-adapter status after detection (``ditorch info`` prints them).
ACTIVE = "active"
NO_DEVICE = "no device"
FAILED = "failed"
NOT_INSTALLED = "not installed"
NOT_TRIED = "installed, not tried"


class Failure(NamedTuple):
    """An adapter that could not be used: its name and the error, in one line."""

    name: str
    error: str


class DetectionError(RuntimeError):
    """``DITORCH_VENDOR`` names an unknown adapter, or the adapter it names cannot be used."""


@dataclass
class Detection:
    """The outcome: the chosen adapter (``None`` for the CPU), failures, and every adapter's status."""

    adapter: Adapter | None
    failures: list[Failure] = field(default_factory=list)
    adapters: list[Adapter] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    forced: bool = False


def _error_text(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_adapters() -> tuple[list[Adapter], list[Failure]]:
    """Every adapter published in the ``ditorch.adapters`` group, in detection order, plus load failures.

    The built-ins are the defaults (so a source checkout without package metadata still works); an entry
    point of the same name replaces one, and one shipped by another distribution wins over ditorch's own.
    """
    from ditorch.adapters import builtin

    found: dict[str, Adapter] = {name: factory() for name, factory in builtin.FACTORIES.items()}
    failures: list[Failure] = []
    points = sorted(
        metadata.entry_points(group=GROUP),
        key=lambda ep: (ep.name, getattr(ep.dist, "name", "") != "ditorch", ep.value),
    )
    for ep in points:
        try:
            adapter = ep.load()()
            if not isinstance(adapter, Adapter):
                raise TypeError(f"{ep.value} returned {type(adapter).__name__}, not an Adapter")
        except Exception as exc:  # noqa: BLE001  (a broken third-party entry point must not stop detection)
            failures.append(Failure(ep.name, f"entry point {ep.value!r} failed to load: {_error_text(exc)}"))
            continue
        found[adapter.name] = adapter
    return sorted(found.values(), key=lambda a: (a.priority, a.name)), failures


def known_names(adapters: list[Adapter]) -> list[str]:
    return [*sorted(a.name for a in adapters), CPU]


def _forced(name: str, adapters: list[Adapter], failures: list[Failure]) -> Detection:
    by_name = {a.name: a for a in adapters}
    status = {a.name: NOT_TRIED if a.is_present() else NOT_INSTALLED for a in adapters}
    if name == CPU:
        return Detection(None, failures, adapters, status, forced=True)
    if name not in by_name:
        raise DetectionError(
            f"DITORCH_VENDOR={name!r} is not a known adapter; known: {', '.join(known_names(adapters))}"
        )
    adapter = by_name[name]
    if not adapter.is_present():
        raise DetectionError(f"DITORCH_VENDOR={name}: its plugin {adapter.framework} is not installed")
    try:
        adapter.import_framework()
    except Exception as exc:  # noqa: BLE001
        raise DetectionError(
            f"DITORCH_VENDOR={name}: importing its plugin {adapter.framework} failed: {_error_text(exc)}"
        ) from exc
    if not adapter.is_available():
        raise DetectionError(
            f"DITORCH_VENDOR={name}: {adapter.framework} imported but reports no usable "
            f"{adapter.device_type} device"
        )
    status[name] = ACTIVE
    return Detection(adapter, failures, adapters, status, forced=True)


def detect(config: DitorchConfig | None = None) -> Detection:
    """Choose the adapter (see the module docstring); imports the plugins it tries."""
    config = DitorchConfig.from_env() if config is None else config
    adapters, failures = load_adapters()
    if config.vendor:
        return _forced(config.vendor, adapters, failures)
    status: dict[str, str] = {}
    chosen: Adapter | None = None
    for adapter in adapters:
        if not adapter.is_present():
            status[adapter.name] = NOT_INSTALLED
        elif chosen is not None:
            status[adapter.name] = NOT_TRIED  # importing it could clash with the chosen plugin
        else:
            try:
                adapter.import_framework()
                available = adapter.is_available()
            except Exception as exc:  # noqa: BLE001  (report it, try the next one)
                failures.append(Failure(adapter.name, f"importing {adapter.framework} failed: {_error_text(exc)}"))
                status[adapter.name] = FAILED
                continue
            status[adapter.name] = ACTIVE if available else NO_DEVICE
            chosen = adapter if available else None
    return Detection(chosen, failures, adapters, status)


def select_adapter(config: DitorchConfig | None = None) -> tuple[Adapter | None, list[Failure]]:
    """The adapter to activate (``None`` for the CPU) and the adapters that failed on the way."""
    detection = detect(config)
    return detection.adapter, detection.failures


def banner(adapter: Adapter | None, pid: int) -> str:
    """``ditorch: <arch> <framework>:<version> pid: <pid>``."""
    if adapter is None:
        import torch

        return f"ditorch: {CPU} torch:{torch.__version__} pid: {pid}"
    return f"ditorch: {adapter.arch()} {adapter.framework}:{adapter.version()} pid: {pid}"


def report_failures(failures: list[Failure], stream=None) -> None:
    """One warning line per failure on stderr."""
    stream = sys.stderr if stream is None else stream
    for failure in failures:
        print(f"ditorch: warning: adapter {failure.name} skipped: {failure.error}", file=stream)
