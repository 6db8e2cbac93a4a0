"""``"cuda"``, ``"cuda:N"`` and ``torch.device("cuda")`` wherever a device is accepted.

Only the functions in the fixed lists below are wrapped; each wrapper looks at its device argument (a dict
lookup when there is none) and hands everything else to PyTorch unchanged. No TorchFunctionMode is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ditorch.mocking.dtype_policy import DtypePolicy
from ditorch.mocking.patches import Patches
from ditorch.mocking.stand_in import mirroring

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

#: torch functions taking a keyword ``device`` (factories and *_like).
FACTORIES = (
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "range", "tensor",
    "as_tensor", "asarray", "eye", "linspace", "logspace", "empty_strided", "empty_like", "zeros_like",
    "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "scalar_tensor", "tril_indices",
    "triu_indices", "normal", "sparse_coo_tensor", "bartlett_window", "blackman_window", "hamming_window",
    "hann_window", "kaiser_window", "empty_permuted",
)
#: Tensor methods taking a keyword ``device``.
TENSOR_FACTORIES = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided")


class Translator:
    """Maps cuda devices to ``device_type`` keeping the index; anything else passes through."""

    def __init__(self, device_type: str, current_device: Callable[[], int], policy: DtypePolicy | None,
                 device_count: Callable[[], int] = lambda: 1) -> None:
        self.device_type = device_type
        self.current_device = current_device
        self.device_count = device_count
        self.policy = policy
        self._strings: dict[str, str] = {}

    def device(self, device: Any) -> Any:
        cls = device.__class__
        if cls is str:
            if device.startswith("cuda"):
                out = self._strings.get(device)
                if out is None:
                    out = self._strings[device] = self.device_type + device[4:]
                return out
            return device
        if cls is torch.device and device.type == "cuda":
            return torch.device(self.device_type, device.index)
        return device

    def device_type_name(self, device_type: Any) -> Any:
        """For APIs taking a device *type* string (autocast, GradScaler): ``"cuda"`` -> ``device_type``."""
        return self.device_type if device_type == "cuda" else device_type

    def args(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """Translate every device-like positional and keyword argument (for torch.cuda functions)."""
        return tuple(self.device(a) for a in args), {k: self.device(v) for k, v in kwargs.items()}

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a vendor function standing in for a torch.cuda one) with its device arguments translated."""

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if args or kwargs:
                args, kwargs = self.args(args, kwargs)
            return fn(*args, **kwargs)

        return call


def _factory(fn: Callable[..., Any], name: str, tr: Translator) -> Callable[..., Any]:
    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None:
            kwargs["device"] = device = tr.device(device)
            if tr.policy is not None:
                args = tr.policy.factory(name, args, kwargs, device)
        if kwargs.get("pin_memory"):
            return _pinned(fn, args, kwargs)
        return fn(*args, **kwargs)

    return factory


def _pinned(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """A factory asked for pinned memory (safetensors does, loading onto ``"cuda"``). A plugin written in
    Python pins through ``Tensor.pin_memory()`` only (it has no C++ pinned allocator for factories): then make
    the tensor and pin it, which is what the factory would have returned."""
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, RuntimeError) as exc:
        if not isinstance(exc, NotImplementedError) and "pinned memory allocator" not in str(exc):
            raise  # (NotImplementedError is a RuntimeError too)
        # no pinned allocator behind factories (a Python plugin; cuda mapped onto the CPU): pin afterwards
        return fn(*args, **{**kwargs, "pin_memory": False}).pin_memory()


def install(patches: Patches, tr: Translator) -> None:
    import torch.utils._device as device_module

    # The factories torch's default-device mode recognises, read before any of them is wrapped.
    constructors = set(device_module._device_constructors.__wrapped__())
    for owner, names in ((torch, FACTORIES), (torch.Tensor, TENSOR_FACTORIES)):
        for name in names:
            fn = getattr(owner, name, None)
            if fn is not None:
                patches.set(owner, name, _factory(fn, name, tr))
    set_default = torch.set_default_device
    patches.set(torch, "set_default_device", functools.wraps(set_default)(
        lambda device: set_default(tr.device(device) if device is not None else None)))
    _install_default_device(patches, tr, constructors)
    _install_to(patches, tr)
    _install_load(patches, tr)
    _install_generator(patches, tr)


def _install_default_device(patches: Patches, tr: Translator, constructors: set) -> None:
    """``with torch.device(...)`` and ``torch.set_default_device`` keep working over the wrapped factories.

    ``torch.utils._device.DeviceContext`` recognises factories by identity in a cached table; the wrappers
    above call the original functions, which is what the mode sees, but the table must hold the originals
    (and the wrappers, for code that calls them through ``__torch_function__`` handlers of its own). A cuda
    device given to the context (``with torch.device("cuda")``) means the adapter's device.
    """
    import torch.utils._device as device_module

    wrapped = {getattr(torch, name) for name in FACTORIES
               if getattr(getattr(torch, name, None), "__wrapped__", None) in constructors}
    table = frozenset(constructors | wrapped)
    patches.set(device_module, "_device_constructors", lambda: table)
    context = device_module.DeviceContext
    init = context.__init__

    @functools.wraps(init)
    def context_init(self: Any, device: Any) -> None:
        init(self, tr.device(device))

    patches.set(context, "__init__", context_init)


def _install_to(patches: Patches, tr: Translator) -> None:
    original_to = torch.Tensor.to
    dt = tr.device_type
    get_device = torch._C.TensorBase.device.__get__
    get_is_cuda = torch._C.TensorBase.is_cuda.__get__

    @functools.wraps(original_to)
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args:
            first = args[0]
            if first.__class__ is str or first.__class__ is torch.device:
                args = (tr.device(first), *args[1:])
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                kwargs["device"] = tr.device(device)
        if tr.policy is not None:
            fixed = tr.policy.move(self, args, kwargs)
            if fixed is not None:
                args, kwargs = fixed
                if get_device(self).type != dt:  # cast on the host: the device cannot read the source dtype
                    self = original_to(self, dtype=kwargs["dtype"])
        return original_to(self, *args, **kwargs)

    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
             memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """``Tensor.cuda()``: a copy on the adapter's device (``device``: index, cuda/vendor device, None)."""
        if device is None:
            device = torch.device(dt, tr.current_device())
        elif isinstance(device, int):
            device = torch.device(dt, device)
        return to(self, tr.device(device), non_blocking=non_blocking, memory_format=memory_format)

    def is_cuda(self: torch.Tensor) -> bool:
        """True for CUDA tensors and for tensors on the adapter's device."""
        return get_device(self).type == dt or get_is_cuda(self)

    patches.set(torch.Tensor, "to", to)
    patches.set(torch.Tensor, "cuda", cuda)
    patches.set(torch.Tensor, "is_cuda", property(is_cuda))
    # Module.cuda() calls t.cuda(device) and Module.to(...) calls t.to(device, ...): both land above.


def _install_load(patches: Patches, tr: Translator) -> None:
    original_load = torch.load
    dt = tr.device_type

    def cuda_locations() -> dict[str, str]:
        """Default map_location: tensors saved on CUDA restore onto the adapter's device (a dict, since torch
        rejects a callable map_location for wrapper-subclass tensors such as dipu's)."""
        count = tr.device_count()
        return {"cuda": dt, **{f"cuda:{i}": f"{dt}:{i}" for i in range(count)}}

    def translate(map_location: Any) -> Any:
        if map_location is None:
            return cuda_locations()
        if isinstance(map_location, dict):
            out = {k: tr.device(v) for k, v in map_location.items()}
            out.update({tr.device(k): tr.device(v) for k, v in map_location.items() if k.startswith("cuda")})
            return out
        return tr.device(map_location)

    @functools.wraps(original_load)
    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (translate(args[0]), *args[1:])
        else:
            kwargs["map_location"] = translate(kwargs.get("map_location"))
        return original_load(f, *args, **kwargs)

    patches.set(torch, "load", load)


def _install_generator(patches: Patches, tr: Translator) -> None:
    base = torch.Generator

    # Every generator, also those torch makes itself (torch.default_generator), stays an instance.
    class Generator(base, metaclass=mirroring(base, type(base))):
        """``torch.Generator(device="cuda")``: a generator of the adapter's device. A plugin that cannot make
        device generators (torch_dipu) gets a host generator, which its random operators accept."""

        def __new__(cls, device: Any = "cpu") -> Any:
            device = tr.device(device)
            try:
                return base.__new__(cls, device)
            except (NotImplementedError, RuntimeError):
                if torch.device(device).type != tr.device_type:
                    raise
                return base.__new__(cls, "cpu")

    Generator.__module__ = "torch"
    Generator.__qualname__ = Generator.__name__ = "Generator"
    patches.set(torch, "Generator", Generator)
