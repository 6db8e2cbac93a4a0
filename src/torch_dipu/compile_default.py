"""``torch.compile`` on dipu: the default backend runs on the device.

PyTorch's default backend, inductor, generates code per device type and has none for dipu (``KeyError:
'dipu'``). ``import torch_dipu`` installs diopi's device-aware default backend (:mod:`diopi.compile_default`: a graph
on a device inductor cannot compile for goes to that device's backend, every other graph to inductor exactly as
``torch.compile`` builds it) and registers dipu's backend there: :func:`fallback_backend`, ``aot_eager`` unless
``DIPU_COMPILE_BACKEND`` or the vendor runtime's ``compile_backend`` names another. Explicit backends (``"eager"``,
``"aot_eager"``, a callable, a vendor's registered backend) are passed through untouched.

Dynamo only models a tensor subclass that overrides ``__torch_dispatch__`` as a tensor when the subclass
is a traceable wrapper (``__tensor_flatten__``), which would make AOTAutograd trace through the device's
kernels into its host storage. A dipu tensor is the device's plain tensor, so :func:`enable_dynamo`
tells dynamo to treat it as one (a fake tensor on the dipu device, as for any C++ backend) and keeps
dynamo out of torch_dipu's own frames (the dispatcher and the kernels run eagerly inside graph breaks).
"""

from __future__ import annotations

import threading
import types
import warnings
from collections import Counter
from typing import Any

import torch

from diopi import compile_default as device_aware
from torch_dipu.state import get_state
from torch_dipu.tensor import DipuTensor

__all__ = [
    "DEFAULT_BACKEND", "chosen_backends", "enable_dynamo", "fallback_backend", "graph_on_device", "install",
    "set_fallback_backend", "uninstall",
]

#: The backend for graphs on dipu when neither ``DIPU_COMPILE_BACKEND`` nor the vendor names one.
DEFAULT_BACKEND = "aot_eager"
_DEVICE_TYPE = "dipu"
_lock = threading.Lock()
_dynamo_enabled = False


def fallback_backend() -> str:
    """The backend that compiles graphs on dipu under ``torch.compile``'s default backend:
    :func:`set_fallback_backend` / ``DIPU_COMPILE_BACKEND``, else the vendor runtime's
    ``compile_backend``, else ``aot_eager`` (forward and backward, PyTorch's own operators)."""
    state = get_state()
    return state.config.compile_backend or getattr(state.runtime, "compile_backend", None) or DEFAULT_BACKEND


def check_backend(name: str, source: str = "DIPU_COMPILE_BACKEND") -> None:
    """Raise :class:`~diopi.env.ConfigError` naming ``source`` when ``name`` is no registered dynamo backend
    (torch._dynamo is imported only for this, when a backend is named)."""
    import difflib

    from torch._dynamo import list_backends

    from diopi.env import ConfigError

    known = set(list_backends(exclude_tags=())) | {"eager", "aot_eager", "inductor"}
    if name not in known:
        near = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ConfigError(f"{source}={name!r} is not a registered torch.compile backend{hint}; known: "
                          f"{', '.join(sorted(known))}")


def set_fallback_backend(name: str | None) -> None:
    """Name the backend for graphs on dipu (a registered dynamo backend, e.g. ``"eager"``, ``"aot_eager"`` or
    a vendor's); ``None`` or ``""`` goes back to the vendor's default. Applies to graphs compiled from now on."""
    get_state().config.compile_backend = (name or "").strip()


def chosen_backends() -> Counter[str]:
    """How many graphs the default backend has compiled so far with each backend, by name (a copy)."""
    return device_aware.chosen_backends()


def graph_on_device(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    """Whether a captured graph touches the dipu device: an example input (fake or real tensor), a value the
    graph computes, or a device argument of one of its calls (``device="dipu"``, ``.to("dipu:1")``)."""
    return _DEVICE_TYPE in device_aware.devices_of(gm, example_inputs)


def install() -> None:
    """Install the device-aware default backend with dipu's backend registered, and let fake tensors make dipu
    constants (idempotent: a second call, or a second import, wraps nothing again)."""
    device_aware.register_device(_DEVICE_TYPE, fallback_backend, prepare=enable_dynamo,
                                 setting="DIPU_COMPILE_BACKEND or the vendor's compile_backend")
    device_aware.install()
    _fake_constants_on_host()


def uninstall() -> None:
    """Give ``torch.compile`` back its original (graphs already compiled keep their backend)."""
    device_aware.uninstall()


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


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and the code of every function defined inside it, at any depth."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_nested_codes(const))
    return found


def _dispatch_codes() -> list[types.CodeType]:
    """The code that a dipu operator call enters from outside: ``DipuTensor.__torch_dispatch__`` where it is Python;
    with the compiled dispatcher (torch_dipu._fastpath), which has no frame, the handlers it calls, i.e. every
    function the handler builders define."""
    from torch_dipu import device_kernels, dicl, dispatch

    method = DipuTensor.__dict__["__torch_dispatch__"].__func__
    codes = [method.__code__] if hasattr(method, "__code__") else []
    for builder in (dispatch.build_handler, dicl.build_handler, device_kernels.build_handler):
        codes.extend(_nested_codes(builder.__code__)[1:])
    return codes


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
        skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
        for code in _dispatch_codes():
            set_code_exec_strategy(code, skip)
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
