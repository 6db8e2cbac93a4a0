"""``torch.compile`` on dipu: the default backend runs on the device.

PyTorch's default backend, inductor, generates code per device type and has none for dipu (``KeyError:
'dipu'``). Until dipu has its own graph compiler, ``import torch_dipu`` wraps ``torch.compile`` (see
:func:`install`) so that the default backend decides per captured graph: a graph that touches the dipu
device (an example input, a value computed in the graph, or a ``device=`` argument) is compiled with the
device's backend (:func:`fallback_backend`, ``aot_eager`` unless ``DIPU_COMPILE_BACKEND`` or the vendor
runtime's ``compile_backend`` names another), every other graph with inductor exactly as ``torch.compile``
builds it. The decision is made once per graph at compile time; compiled code runs without a wrapper.
Explicit backends (``backend="eager"``, ``"aot_eager"``, a callable, a vendor's registered backend) are
passed through untouched.

Dynamo only models a tensor subclass that overrides ``__torch_dispatch__`` as a tensor when the subclass
is a traceable wrapper (``__tensor_flatten__``), which would make AOTAutograd trace through the device's
kernels into its host storage. A dipu tensor is the device's plain tensor, so :func:`enable_dynamo`
tells dynamo to treat it as one (a fake tensor on the dipu device, as for any C++ backend) and keeps
dynamo out of torch_dipu's own frames (the dispatcher and the kernels run eagerly inside graph breaks).
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from torch_dipu.state import get_state
from torch_dipu.tensor import DipuTensor

__all__ = [
    "DEFAULT_BACKEND", "chosen_backends", "enable_dynamo", "fallback_backend", "graph_on_device", "install",
    "set_fallback_backend", "uninstall",
]

log = logging.getLogger("torch_dipu")

#: The backend for graphs on dipu when neither ``DIPU_COMPILE_BACKEND`` nor the vendor names one.
DEFAULT_BACKEND = "aot_eager"
_DEVICE_TYPE = "dipu"
_ORIGINAL = "__torch_dipu_original__"  # attribute of the wrapper: the torch.compile it wraps

#: Backend chosen per graph by the default backend, by name (``"inductor"`` or the fallback's name).
_CHOSEN: Counter[str] = Counter()
_lock = threading.Lock()
_warned_inductor_settings = False
_dynamo_enabled = False


def fallback_backend() -> str:
    """The backend that compiles graphs on dipu under ``torch.compile``'s default backend:
    :func:`set_fallback_backend` / ``DIPU_COMPILE_BACKEND``, else the vendor runtime's
    ``compile_backend``, else ``aot_eager`` (forward and backward, PyTorch's own operators)."""
    state = get_state()
    return state.config.compile_backend or getattr(state.runtime, "compile_backend", None) or DEFAULT_BACKEND


def set_fallback_backend(name: str | None) -> None:
    """Name the backend for graphs on dipu (a registered dynamo backend, e.g. ``"eager"``, ``"aot_eager"`` or
    a vendor's); ``None`` or ``""`` goes back to the vendor's default. Applies to graphs compiled from now on."""
    get_state().config.compile_backend = (name or "").strip()


def chosen_backends() -> Counter[str]:
    """How many graphs the default backend has compiled so far with each backend (a copy)."""
    with _lock:
        return Counter(_CHOSEN)


def _tensors_and_devices(gm: torch.fx.GraphModule) -> Iterator[Any]:
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            yield from tree_leaves(node.meta.get("example_value", node.meta.get("val")))
            yield from tree_leaves((node.args, node.kwargs))


def _on_device(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == _DEVICE_TYPE
    if isinstance(value, torch.device):
        return value.type == _DEVICE_TYPE
    if isinstance(value, str):
        return value == _DEVICE_TYPE or value.startswith(_DEVICE_TYPE + ":")
    return False


def graph_on_device(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    """Whether a captured graph touches the dipu device: an example input (fake or real tensor), a value the
    graph computes, or a device argument of one of its calls (``device="dipu"``, ``.to("dipu:1")``)."""
    return any(map(_on_device, example_inputs)) or any(map(_on_device, _tensors_and_devices(gm)))


class DeviceAwareInductor:
    """The default backend under torch_dipu: graphs on dipu go to :func:`fallback_backend`, every other graph
    to ``inductor`` (the ``torch._TorchCompileInductorWrapper`` that ``torch.compile`` builds for ``mode`` and
    ``options``)."""

    def __init__(self, mode: str | None, options: dict[str, Any] | None, dynamic: bool | None,
                 name: str | None = None) -> None:
        if mode is None and options is None:
            mode = "default"
        self.inductor = torch._TorchCompileInductorWrapper(mode, options, dynamic, name)
        #: mode/options that only inductor understands (a graph on dipu ignores them, with one warning).
        self.inductor_settings = {k: v for k, v in (("mode", mode), ("options", options)) if v and v != "default"}
        # torch.compile names a callable backend after its __name__ (logs, the dynamo registry check)
        self.__name__ = "inductor"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        if not graph_on_device(gm, example_inputs):
            _choose("inductor")
            return self.inductor(gm, example_inputs, **kwargs)
        name = fallback_backend()
        if self.inductor_settings:
            _warn_inductor_settings(self.inductor_settings, name)
        from torch._dynamo.backends.registry import list_backends, lookup_backend

        try:
            backend = lookup_backend(name)
        except Exception as exc:
            raise RuntimeError(
                f"torch_dipu: the backend for graphs on {_DEVICE_TYPE}, {name!r} (DIPU_COMPILE_BACKEND or the "
                f"vendor's compile_backend), is not a registered dynamo backend; registered: "
                f"{', '.join(list_backends())}"
            ) from exc
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
    log.debug("torch.compile: default backend compiles a graph with %s", name)


def _warn_inductor_settings(settings: dict[str, Any], name: str) -> None:
    global _warned_inductor_settings
    with _lock:
        if _warned_inductor_settings:
            return
        _warned_inductor_settings = True
    given = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    warnings.warn(
        f"torch.compile({given}): these are inductor settings; graphs on {_DEVICE_TYPE} are compiled with "
        f"{name!r} (DIPU_COMPILE_BACKEND), which ignores them. Graphs on the CPU still use them.",
        UserWarning,
        stacklevel=2,
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
        enable_dynamo()
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
    """Wrap ``torch.compile`` and let fake tensors make dipu constants (idempotent: a second call, or a second
    import, wraps nothing again)."""
    if getattr(torch.compile, _ORIGINAL, None) is None:
        torch.compile = _wrap(torch.compile)
    _fake_constants_on_host()


def uninstall() -> None:
    """Give ``torch.compile`` back its original (graphs already compiled keep their backend)."""
    original = getattr(torch.compile, _ORIGINAL, None)
    if original is not None:
        torch.compile = original


def _fake_constants_on_host() -> None:
    """Under a ``FakeTensorMode`` (dynamo, AOTAutograd, export), ``torch.tensor(data, device="dipu")`` must make
    the constant on the host and fake its move to dipu, as PyTorch does on a CPU-only build. PyTorch decides
    this with ``FakeTensorMode.avoid_device_init``, which is False as soon as a PrivateUse1 backend is
    available: the constant would be a real dipu tensor, a tensor subclass that fake mode declines, and the
    "fake" result would land on the CPU (``Tensor device mismatch`` in ``torch.cat([cache, x])``). A Python
    device has nothing to initialize, so the answer ignores dipu; builds with a real CUDA or XPU device keep
    PyTorch's answer."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    prop = FakeTensorMode.__dict__.get("avoid_device_init")
    if not isinstance(prop, property) or getattr(prop.fget, "_torch_dipu", False):
        return
    original = prop.fget

    def avoid_device_init(self: FakeTensorMode) -> bool:
        real_cuda = hasattr(torch._C, "_cuda_getDeviceCount") and torch._C._cuda_getDeviceCount() > 0
        return original(self) if real_cuda or getattr(torch._C, "_has_xpu", False) else True

    avoid_device_init._torch_dipu = True  # type: ignore[attr-defined]
    FakeTensorMode.avoid_device_init = property(avoid_device_init, doc=prop.__doc__)


def enable_dynamo() -> None:
    """Let dynamo trace dipu tensors. ``torch.compile`` calls it (each call checks that everything is still
    in place: cheap, and robust to ``torch._dynamo.reset()``); call it yourself before using dynamo's own
    entry points (``torch._dynamo.optimize``, ``torch.export``) on dipu tensors.

    - a dipu tensor (``DipuTensor``, parameters included) is wrapped as a plain tensor: dynamo fakes it as a
      ``FakeTensor`` on the dipu device, operators run their meta kernels while tracing, and the compiled
      graph calls the dipu operators at run time;
    - dynamo never compiles torch_dipu's or diopi's own frames, nor anything the dipu dispatcher calls (the
      vendor's kernels): inside a graph break they run eagerly, as PyTorch's own kernels do. Without this,
      dynamo would compile the dispatcher's handlers into graphs of host operators on the storage tensors.
    """
    global _dynamo_enabled
    try:
        from torch._dynamo import trace_rules
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        from torch._dynamo.variables import builder

        vb = builder.VariableBuilder
        for trace_numpy in (False, True):  # the type table is cached per value of config.trace_numpy
            vb._type_dispatch_impl(trace_numpy)[DipuTensor] = vb.wrap_tensor
        infer_subclass_type = builder.infer_subclass_type
        if not getattr(infer_subclass_type, "_torch_dipu", False):

            def plain_for_dipu(value: Any) -> Any:
                return None if type(value) is DipuTensor else infer_subclass_type(value)

            plain_for_dipu._torch_dipu = True  # type: ignore[attr-defined]
            builder.infer_subclass_type = plain_for_dipu
        dispatch = DipuTensor.__dict__["__torch_dispatch__"].__func__.__code__
        set_code_exec_strategy(dispatch, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
        with _lock:
            if not _dynamo_enabled:
                trace_rules.add("torch_dipu")
                trace_rules.add("diopi")
                _dynamo_enabled = True
    except (ImportError, AttributeError, TypeError) as exc:  # a torch whose dynamo internals moved
        with _lock:
            if _dynamo_enabled:
                return
            _dynamo_enabled = True
        warnings.warn(
            f"torch_dipu: cannot teach this torch's dynamo ({torch.__version__}) about dipu tensors ({exc!r}); "
            f"torch.compile of code on {_DEVICE_TYPE} will break graphs or fail",
            UserWarning,
            stacklevel=2,
        )
