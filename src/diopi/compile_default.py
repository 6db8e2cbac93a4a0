"""``torch.compile``'s default backend on devices that inductor cannot compile for.

inductor generates code per device type: the CPU, cuda, xpu, mps and any device that registered a code generator
(``torch._inductor.codegen.common.register_backend_for_device``). A graph on another device (a PrivateUse1
plugin's: dipu, or any vendor's) fails there (``KeyError: '<device>'``). :func:`install` wraps ``torch.compile`` so
that its default backend decides, once per captured graph:

1. which devices the graph touches: an example input (fake or real tensor), a value the graph computes, or a
   device argument of one of its calls (``device="x"``, ``.to("x:1")``);
2. none that inductor cannot compile for: inductor, exactly as ``torch.compile`` builds it (``mode``, ``options``);
3. otherwise that device's backend: the one registered for it (:func:`register_device`, e.g. torch_dipu's vendor
   choice; or an entry point in the group ``dicp.device_backends`` named after the device type, which a vendor's
   graph-compiler package publishes), else ``aot_eager`` (PyTorch's operators, forward and backward). The first
   such graph per device prints one line to stderr naming the backend.

Explicit backends (``backend="eager"``, a callable, a vendor's registered backend) pass through untouched, and so
does everything when no device inductor lacks is involved. The wrapper costs one check per ``torch.compile`` call;
compiled code runs without it. This module lives in diopi, the layer every other one may import, because both
torch_dipu (for dipu on its own) and ditorch (for any vendor plugin) install it: one mechanism, one place.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

__all__ = [
    "ENTRY_POINT_GROUP", "FALLBACK", "backend_for", "chosen_backends", "devices_of", "inductor_compiles_for",
    "install", "register_device", "uninstall",
]

#: Entry point group: ``<device type> = "package.module:backend"`` (a dynamo backend, or a backend's name).
ENTRY_POINT_GROUP = "dicp.device_backends"
#: The backend for graphs on a device inductor cannot compile for and that registered none.
FALLBACK = "aot_eager"
_ORIGINAL = "__device_aware_original__"  # attribute of the wrapper: the torch.compile it wraps


class _DeviceBackend:
    """A device's registration: how its backend is chosen, what to run before each ``torch.compile``, and the
    text of a refusal for a backend name that is not registered."""

    def __init__(self, choose: Callable[[], Any], prepare: Callable[[], None] | None, setting: str) -> None:
        self.choose, self.prepare, self.setting = choose, prepare, setting


_DEVICES: dict[str, _DeviceBackend] = {}
_CHOSEN: Counter[str] = Counter()
_ANNOUNCED: set[str] = set()
_INDUCTOR: dict[str, bool] = {}
_lock = threading.Lock()
_warned_inductor_settings = False


def register_device(device_type: str, choose: Callable[[], Any], *, prepare: Callable[[], None] | None = None,
                    setting: str = "") -> None:
    """Name the backend for graphs on ``device_type``: ``choose()`` returns a registered dynamo backend's name or a
    backend callable (asked per graph, so a setting can change it; empty: :data:`FALLBACK`). ``prepare`` runs before
    every ``torch.compile`` call (e.g. to teach dynamo the device's tensors); ``setting`` names where the user
    chooses the backend (for the error about an unknown name)."""
    with _lock:
        _DEVICES[device_type] = _DeviceBackend(choose, prepare, setting)


def inductor_compiles_for(device_type: str) -> bool:
    """Whether inductor has a code generator for ``device_type`` (asked once per device type)."""
    known = _INDUCTOR.get(device_type)
    if known is None:
        try:
            from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

            init_backend_registration()
            known = get_scheduling_for_device(device_type) is not None
        except Exception:  # noqa: BLE001  (an inductor that cannot even load compiles for nothing)
            known = device_type == "cpu"
        _INDUCTOR[device_type] = known
    return known


def _from_entry_point(device_type: str) -> Any:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == device_type:
            return ep.load()
    return None


def backend_for(device_type: str) -> Any:
    """The backend for graphs on ``device_type`` (a name or a callable): its registration, else its
    ``dicp.device_backends`` entry point, else :data:`FALLBACK`."""
    registered = _DEVICES.get(device_type)
    if registered is not None:
        return registered.choose() or FALLBACK
    found = _from_entry_point(device_type)
    if found is not None:
        register_device(device_type, lambda: found, setting=f"entry point {device_type!r} in {ENTRY_POINT_GROUP}")
        return found
    return FALLBACK


def chosen_backends() -> Counter[str]:
    """How many graphs the default backend has compiled so far with each backend, by name (a copy)."""
    with _lock:
        return Counter(_CHOSEN)


def _values(gm: torch.fx.GraphModule) -> Iterator[Any]:
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            yield from tree_leaves(node.meta.get("example_value", node.meta.get("val")))
            yield from tree_leaves((node.args, node.kwargs))


def _device_type(value: Any) -> str | None:
    if isinstance(value, torch.Tensor | torch.device):
        return value.device.type if isinstance(value, torch.Tensor) else value.type
    if isinstance(value, str) and value and value.split(":")[0].isidentifier():
        try:
            return torch.device(value).type
        except RuntimeError:
            return None
    return None


def devices_of(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> set[str]:
    """The device types a captured graph touches (example inputs, computed values, device arguments)."""
    found = {_device_type(v) for v in example_inputs}
    found.update(_device_type(v) for v in _values(gm))
    found.discard(None)
    return found  # type: ignore[return-value]


def _name(backend: Any) -> str:
    return backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)


class DeviceAwareInductor:
    """The default backend under :func:`install`: graphs on a device inductor cannot compile for go to that
    device's backend (:func:`backend_for`), every other graph to ``inductor`` (the
    ``torch._TorchCompileInductorWrapper`` that ``torch.compile`` builds for ``mode`` and ``options``)."""

    def __init__(self, mode: str | None, options: dict[str, Any] | None, dynamic: bool | None,
                 name: str | None = None) -> None:
        if mode is None and options is None:
            mode = "default"
        self.inductor = torch._TorchCompileInductorWrapper(mode, options, dynamic, name)
        #: mode/options that only inductor understands (a graph on another backend ignores them, one warning).
        self.inductor_settings = {k: v for k, v in (("mode", mode), ("options", options)) if v and v != "default"}
        # torch.compile names a callable backend after its __name__ (logs, the dynamo registry check)
        self.__name__ = "inductor"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        foreign = sorted(d for d in devices_of(gm, example_inputs) if not inductor_compiles_for(d))
        if not foreign:
            _choose("inductor")
            return self.inductor(gm, example_inputs, **kwargs)
        device = foreign[0]
        backend = backend_for(device)
        name = _name(backend)
        if self.inductor_settings:
            _warn_inductor_settings(self.inductor_settings, name, device)
        if isinstance(backend, str):
            from torch._dynamo.backends.registry import list_backends, lookup_backend

            try:
                backend = lookup_backend(name)
            except Exception as exc:
                setting = _DEVICES[device].setting if device in _DEVICES else ""
                raise RuntimeError(
                    f"torch.compile: the backend for graphs on {device}, {name!r}"
                    + (f" ({setting})" if setting else "")
                    + f", is not a registered dynamo backend; registered: {', '.join(list_backends())}"
                ) from exc
        _announce(device, name)
        _choose(name)
        return backend(gm, example_inputs)

    def reset(self) -> None:
        self.inductor.reset()

    def get_compiler_config(self) -> Any:
        return self.inductor.get_compiler_config()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceAwareInductor) and self.inductor == other.inductor

    __hash__ = None  # type: ignore[assignment]  (as torch._TorchCompileInductorWrapper)

    def __repr__(self) -> str:
        return f"DeviceAwareInductor({self.inductor_settings or ''})"


def _choose(name: str) -> None:
    with _lock:
        _CHOSEN[name] += 1


def _announce(device: str, name: str) -> None:
    with _lock:
        if device in _ANNOUNCED:
            return
        _ANNOUNCED.add(device)
    print(f"torch.compile: inductor has no code generator for {device}; graphs on {device} are compiled with "
          f"{name!r}", file=sys.stderr, flush=True)


def _warn_inductor_settings(settings: dict[str, Any], name: str, device: str) -> None:
    global _warned_inductor_settings
    with _lock:
        if _warned_inductor_settings:
            return
        _warned_inductor_settings = True
    given = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    warnings.warn(
        f"torch.compile({given}): these are inductor settings; graphs on {device} are compiled with {name!r}, "
        f"which ignores them. Graphs on the CPU still use them.",
        UserWarning,
        stacklevel=3,
    )


def _default_backend() -> Any:
    try:
        from torch._dynamo.backends.registry import get_default_backend
    except ImportError:  # torch < 2.13: the default is always inductor
        return "inductor"
    return get_default_backend()


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compile(model: Callable[..., Any] | None = None, **kwargs: Any) -> Any:  # noqa: A001
        if model is None:  # @torch.compile(mode=...): decorate later, through this wrapper

            def decorate(fn: Callable[..., Any]) -> Any:
                if fn is None:
                    raise RuntimeError("Model can't be None")
                return compile(fn, **kwargs)

            return decorate
        for registered in list(_DEVICES.values()):
            if registered.prepare is not None:
                registered.prepare()
        backend = kwargs.get("backend")
        if backend is None:
            backend = _default_backend()
        mode, options = kwargs.get("mode"), kwargs.get("options")
        if (
            not isinstance(backend, str)
            or backend != "inductor"
            or (mode is not None and options is not None)  # torch.compile's own error
            or (options is not None and not isinstance(options, dict))
            or (options and options.get("use_aoti"))  # AOTInductor: deployment artifacts, left to torch
        ):
            return original(model, **kwargs)
        options = dict(options) if options is not None else None
        guard_filter_fn = options.pop("guard_filter_fn", None) if options else None
        if options:
            options.pop("use_aoti", None)
        kwargs["backend"] = DeviceAwareInductor(mode, options, kwargs.get("dynamic"), kwargs.get("name"))
        kwargs["mode"] = None
        kwargs["options"] = {"guard_filter_fn": guard_filter_fn} if guard_filter_fn is not None else None
        return original(model, **kwargs)

    setattr(compile, _ORIGINAL, original)
    return compile


def install() -> None:
    """Wrap ``torch.compile`` (idempotent: a second call wraps nothing again)."""
    if getattr(torch.compile, _ORIGINAL, None) is None:
        torch.compile = _wrap(torch.compile)


def uninstall() -> None:
    """Give ``torch.compile`` back its original (graphs already compiled keep their backend)."""
    original = getattr(torch.compile, _ORIGINAL, None)
    if original is not None:
        torch.compile = original
