"""Which vendor plugin to use: load the ``ditorch.adapters`` entry points, try them in order, pick one.

Order is deterministic: priority, then name. An adapter is *tried* when its plugin is installed: the
plugin is imported and the first one with a usable device wins; nothing usable means the CPU
(``None``). A plugin that is installed but fails to import, and an entry point that fails to load, are
recorded as failures (adapter name, error text) and detection goes on, except when the plugin refuses a
malformed setting (it raises :class:`diopi.env.ConfigError`, e.g. for ``DROPLET_FAULTS``): that is the user's
error and propagates, never a quiet move to the CPU. ``DITORCH_VENDOR`` skips
detection: an unknown name or a failing plugin is then an error.

A plugin already holding PrivateUse1 when detection starts (loaded by PyTorch's backend autoload on
``import torch``, or imported by the user first) is the process's plugin: no other PrivateUse1 plugin can load
beside it, so adapters of other PrivateUse1 devices are not tried, and when no explicit adapter covers its device
type the generic adapter (:mod:`ditorch.adapters.generic`, ranked last) uses it. ``DITORCH_VENDOR`` may also name
that device type, or a plugin package to import (``DITORCH_VENDOR=torch_x``) that has no adapter.

Device visibility: with mocking on, ``CUDA_VISIBLE_DEVICES`` is copied into a vendor plugin's own variable
(:attr:`Adapter.visible_devices_env`, e.g. ``DIPU_VISIBLE_DEVICES``) right before the plugin is imported,
unless that variable is set already (it then wins, with one warning when the two differ). A selection that
hides every device leaves the adapter without a device (the CPU, with a warning saying why); a selection the
plugin rejects (an index that does not exist) is an error, also during detection.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import NamedTuple

from diopi import privateuse1
from diopi.env import ConfigError
from ditorch.adapters import generic
from ditorch.adapters.base import Adapter
from ditorch.config import DitorchConfig

GROUP = "ditorch.adapters"
CPU = "cpu"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

# Per-adapter status after detection (``ditorch info`` prints them).
ACTIVE = "active"
NO_DEVICE = "no device"
FAILED = "failed"
NOT_INSTALLED = "not installed"
NOT_TRIED = "installed, not tried"
HELD_ELSEWHERE = "not tried"  # + ": PrivateUse1 is held by <plugin>"


class Failure(NamedTuple):
    """An adapter that could not be used: its name and the error, in one line."""

    name: str
    error: str


class DetectionError(ConfigError, RuntimeError):
    """``DITORCH_VENDOR`` names an unknown adapter, or the adapter it names cannot be used, or a device
    selection (``CUDA_VISIBLE_DEVICES``, the vendor's variable) names devices the plugin does not have. A
    :class:`~diopi.env.ConfigError` (the ``ditorch`` command prints it as one line, exit status 2) and, as it
    always was, a ``RuntimeError``."""


@dataclass
class Detection:
    """The outcome: the chosen adapter (``None`` for the CPU), failures, and every adapter's status."""

    adapter: Adapter | None
    failures: list[Failure] = field(default_factory=list)
    adapters: list[Adapter] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    forced: bool = False
    #: Lines ``import ditorch`` prints as warnings (a device selection that hides every device, the vendor's
    #: variable overriding ``CUDA_VISIBLE_DEVICES``).
    warnings: list[str] = field(default_factory=list)


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
    return in_order(list(found.values())), failures


def in_order(adapters: list[Adapter]) -> list[Adapter]:
    """Detection order: priority, then name."""
    return sorted(adapters, key=lambda a: (a.priority, a.name))


def with_generic(adapters: list[Adapter], held: privateuse1.Holder | None) -> list[Adapter]:
    """``adapters`` plus the generic adapter of the plugin holding PrivateUse1, unless an adapter covers its device
    type already (detection order kept)."""
    if held is None or any(a.device_type == held.device_type for a in adapters):
        return adapters
    return in_order([*adapters, generic.adapter_for(held)])


def _blocked(adapter: Adapter, held: privateuse1.Holder | None) -> str | None:
    """Why ``adapter`` cannot load beside the plugin holding PrivateUse1 (None: it can)."""
    if held is None or not adapter.uses_privateuse1 or adapter.device_type == held.device_type:
        return None
    return f"PrivateUse1 is held by {held.describe()}"


def known_names(adapters: list[Adapter]) -> list[str]:
    return [*sorted(a.name for a in adapters), CPU]


class _Selection(NamedTuple):
    """The device selection a plugin sees: its variable, the value, and how to name it in messages."""

    env: str
    value: str
    source: str  # "CUDA_VISIBLE_DEVICES='1'" when it came from there, else "DIPU_VISIBLE_DEVICES='1'"

    def hides_all(self) -> bool:
        return self.value.strip() in ("", "-1")


def pass_visible_devices(adapter: Adapter, config: DitorchConfig, warnings: list[str]) -> _Selection | None:
    """Before ``adapter``'s plugin is imported: copy ``CUDA_VISIBLE_DEVICES`` into the plugin's own variable
    (``os.environ``, so child processes see it too) when mocking will be installed and that variable is unset.
    If both are set and differ, the plugin's variable wins and ``warnings`` gets one line. Native backends
    are never touched (real CUDA reads ``CUDA_VISIBLE_DEVICES`` itself). Returns the selection in force."""
    env = adapter.visible_devices_env
    if adapter.is_native or not env:
        return None
    cuda = config.cuda_visible_devices
    own = os.environ.get(env)
    if cuda is not None and not config.disable_mock:
        if own is None:
            os.environ[env] = own = cuda
        elif own != cuda:
            warnings.append(f"{env}={own!r} wins over {CUDA_VISIBLE_DEVICES}={cuda!r} for {adapter.framework}")
        if own == cuda:
            return _Selection(env, own, f"{CUDA_VISIBLE_DEVICES}={cuda!r} (passed to {adapter.framework} as {env})")
    return None if own is None else _Selection(env, own, f"{env}={own!r}")


def _selection_error(selection: _Selection | None, exc: BaseException) -> str | None:
    """The message for a plugin import error caused by the device selection (it names the plugin's
    variable), naming where the selection came from; None for any other error."""
    text = " ".join(str(exc).split())
    if selection is None or selection.env not in text:
        return None
    return f"{selection.source}: {text.removeprefix(f'{selection.env}={selection.value!r}: ')}"


def _no_device_reason(adapter: Adapter, selection: _Selection | None) -> str | None:
    if selection is None:
        return None
    if selection.hides_all():
        return f"{selection.source} hides every {adapter.device_type} device"
    return f"{selection.source} selects no usable {adapter.device_type} device"


def _plugin_package(name: str, adapters: list[Adapter], failures: list[Failure],
                    held: privateuse1.Holder | None) -> Adapter:
    """``DITORCH_VENDOR`` names no adapter: a plugin package to import (one that registers a PrivateUse1 device
    and has no adapter), used through the generic adapter."""
    failed = {f.name: f.error for f in failures}
    if name in failed:
        raise DetectionError(f"DITORCH_VENDOR={name}: its adapter could not be loaded: {failed[name]}")
    known = ", ".join(known_names(adapters))
    module_name = name.replace("-", "_")
    try:
        installed = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        hint = f"; {held.describe()} holds PrivateUse1: DITORCH_VENDOR={held.device_type} selects it" if held else ""
        raise DetectionError(f"DITORCH_VENDOR={name!r} is neither a known adapter (known: {known}) nor an installed "
                             f"plugin package{hint}")
    if held is None:
        try:
            importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001
            raise DetectionError(f"DITORCH_VENDOR={name}: importing the plugin {module_name} failed: "
                                 f"{_error_text(exc)}") from None
        held = privateuse1.holder()
    if held is None or (held.package and held.package != module_name):
        owner = f"; PrivateUse1 is held by {held.describe()}" if held else ""
        raise DetectionError(f"DITORCH_VENDOR={name}: {module_name} registers no PrivateUse1 device (it is not a "
                             f"device plugin, and no adapter has that name; known: {known}){owner}")
    return next((a for a in adapters if a.device_type == held.device_type), None) or generic.adapter_for(held)


def _forced(name: str, adapters: list[Adapter], failures: list[Failure], config: DitorchConfig,
            held: privateuse1.Holder | None) -> Detection:
    by_name = {a.name: a for a in adapters}
    status = {a.name: NOT_TRIED if a.is_present() else NOT_INSTALLED for a in adapters}
    if name == CPU:
        return Detection(None, failures, adapters, status, forced=True)
    adapter = by_name.get(name) or _plugin_package(name, adapters, failures, held)
    if adapter.name not in by_name:
        adapters = in_order([*adapters, adapter])
    if not adapter.is_present():
        raise DetectionError(f"DITORCH_VENDOR={name}: its plugin {adapter.framework} is not installed")
    blocked = _blocked(adapter, held)
    if blocked is not None:
        raise DetectionError(f"DITORCH_VENDOR={name}: {adapter.framework} cannot load: {blocked}")
    warnings: list[str] = []
    selection = pass_visible_devices(adapter, config, warnings)
    try:
        adapter.import_framework()
    except Exception as exc:  # noqa: BLE001
        reason = _selection_error(selection, exc)
        if reason is not None:
            raise DetectionError(f"DITORCH_VENDOR={name}: {reason}") from None
        if isinstance(exc, ConfigError):  # the plugin refused a malformed setting (DROPLET_FAULTS, ...): say so
            raise
        raise DetectionError(
            f"DITORCH_VENDOR={name}: importing its plugin {adapter.framework} failed: {_error_text(exc)}"
        ) from exc
    try:
        available = adapter.is_available()
    except Exception as exc:  # noqa: BLE001
        raise DetectionError(f"DITORCH_VENDOR={name}: {adapter.framework} imported but asking it for its "
                             f"{adapter.device_type} devices failed: {_error_text(exc)}") from None
    if not available:
        reason = _no_device_reason(adapter, selection)
        raise DetectionError(
            f"DITORCH_VENDOR={name}: {adapter.framework} imported but reports no usable "
            f"{adapter.device_type} device" + (f": {reason}" if reason else "")
        )
    status[adapter.name] = ACTIVE
    return Detection(adapter, failures, adapters, status, forced=True, warnings=warnings)


def detect(config: DitorchConfig | None = None) -> Detection:
    """Choose the adapter (see the module docstring); imports the plugins it tries."""
    config = DitorchConfig.from_env() if config is None else config
    adapters, failures = load_adapters()
    held = privateuse1.holder()  # a plugin loaded before detection (autoload, or imported by the user)
    adapters = with_generic(adapters, held)
    if config.vendor:
        return _forced(config.vendor, adapters, failures, config, held)
    status: dict[str, str] = {}
    warnings: list[str] = []
    hidden: list[str] = []
    chosen: Adapter | None = None
    for adapter in adapters:
        blocked = _blocked(adapter, held)
        if not adapter.is_present():
            status[adapter.name] = NOT_INSTALLED
        elif chosen is not None:
            status[adapter.name] = NOT_TRIED  # importing it could clash with the chosen plugin
        elif blocked is not None:
            status[adapter.name] = f"{HELD_ELSEWHERE}: {blocked}"
        else:
            selection = pass_visible_devices(adapter, config, warnings)
            try:
                adapter.import_framework()
                available = adapter.is_available()
            except Exception as exc:  # noqa: BLE001  (report it, try the next one)
                reason = _selection_error(selection, exc)
                if reason is not None:  # the user asked for devices that do not exist: say so, do not fall back
                    raise DetectionError(reason) from None
                if isinstance(exc, ConfigError):  # a malformed setting of the user's (DROPLET_FAULTS, ...): an
                    raise  # error, never a quiet move to the CPU
                failures.append(Failure(adapter.name, f"importing {adapter.framework} failed: {_error_text(exc)}"))
                status[adapter.name] = FAILED
                continue
            reason = None if available else _no_device_reason(adapter, selection)
            status[adapter.name] = ACTIVE if available else NO_DEVICE + (f": {reason}" if reason else "")
            if reason:
                hidden.append(reason)
            elif not available and held is not None and adapter.device_type == held.device_type:
                hidden.append(f"{held.describe()} holds PrivateUse1 but reports no usable device")
            chosen = adapter if available else None
    if chosen is None and hidden:
        warnings.append("; ".join(hidden) + "; ditorch runs on the CPU")
    if chosen is not None and chosen.is_generic and config.cuda_visible_devices is not None and not config.disable_mock:
        warnings.append(f"{CUDA_VISIBLE_DEVICES}={config.cuda_visible_devices!r} is not passed to {chosen.framework}: "
                        f"it has no adapter naming its own variable (Adapter.visible_devices_env); every "
                        f"{chosen.device_type} device stays visible")
    return Detection(chosen, failures, adapters, status, warnings=warnings)


def banner(adapter: Adapter | None, pid: int) -> str:
    """``ditorch: <arch> <framework>:<version> pid: <pid>``."""
    if adapter is None:
        import torch

        return f"ditorch: {CPU} torch:{torch.__version__} pid: {pid}"
    return f"ditorch: {adapter.arch()} {adapter.framework}:{adapter.version()} pid: {pid}"


def report(detection: Detection, stream=None) -> None:
    """One warning line per failure and per detection warning on stderr."""
    stream = sys.stderr if stream is None else stream
    for failure in detection.failures:
        print(f"ditorch: warning: adapter {failure.name} skipped: {failure.error}", file=stream)
    for warning in detection.warnings:
        print(f"ditorch: warning: {warning}", file=stream)
