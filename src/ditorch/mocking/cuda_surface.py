"""Every public name of ``torch.cuda`` and its submodules, and what it becomes under the mapping.

The surface is read from ``torch.cuda`` itself (its ``__all__``, the public names its submodules define), so a
name a new PyTorch adds is classified too. Each name resolves to one of:

- ``derived``: built by ditorch from the vendor module (:mod:`.cuda_derived`), for names that must be CUDA-shaped
  whatever the vendor offers (``device`` is a class, properties have ``major``, ``memory_stats`` has CUDA's keys);
- ``vendor``: the vendor module's object of the same name (device arguments translated from cuda);
- ``generic``: where the vendor module has no object of that name, derived from PyTorch's device-generic APIs
  (:mod:`.cuda_generic`: ``torch.accelerator``, ``torch.Stream``, ``torch.Event``, autocast, ...);
- ``derived`` also where neither has it but ditorch can build it (constants with one honest answer, aliases);
- ``kept``: PyTorch's own object, which works unchanged over the mapped names (``memory_summary``,
  ``StreamContext``, the autocast classes), or a type or constant (legacy tensor types, exceptions);
- ``unsupported``: replaced by an object that raises :class:`NotSupportedOnDevice` naming the vendor (a class
  stays usable in ``isinstance``). ``docs/ditorch.md`` lists these names; a test keeps the list complete.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.cuda

from ditorch.mocking import cuda_derived, cuda_generic
from ditorch.mocking.cuda_derived import NotSupportedOnDevice, Vendor
from ditorch.mocking.cuda_generic import Generic
from ditorch.mocking.device_strings import Translator
from ditorch.mocking.patches import Patches
from ditorch.mocking.stand_in import mirroring

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

#: ``torch.cuda``'s submodules whose public names are part of the surface.
SUBMODULES = ("amp", "gds", "graphs", "green_contexts", "jiterator", "memory", "nccl", "nvtx", "profiler", "random",
              "sparse", "streams", "tunable")

#: Always ditorch's, even when the vendor has a function of that name (its own is not CUDA-shaped).
ALWAYS_DERIVED = frozenset({"device", "device_of", "get_device_properties", "get_device_capability", "memory_stats",
                            "memory_stats_as_nested_dict"})

#: PyTorch's Python code that works over the mapped names, and types and constants.
KEPT = frozenset({
    "StreamContext", "memory_summary", "autocast", "custom_fwd", "custom_bwd", "GradScaler",
    "CudaError", "DeferredCudaCallError", "OutOfMemoryError", "AcceleratorError", "cudaStatus", "has_half",
    "has_magma", "Device", "DEVICE_REQUIREMENT", "PYTORCH_RELEASES_CODE_CC",
    *(f"{kind}{suffix}" for kind in ("BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double",
                                     "Float", "Half", "Int", "Long", "Short") for suffix in ("Storage", "Tensor")),
})

#: Private names other code calls on ``torch.cuda``: the vendor's when it has them.
PRIVATE = ("_lazy_init", "_is_in_bad_fork", "_initialized")

#: Why an unsupported name has no counterpart, where more can be said than "the vendor has none".
HINTS = {
    "nccl": "use torch.distributed: ditorch maps the 'nccl' backend to the vendor's collective backend",
    "graphs": "CUDA graphs replay captured CUDA kernels; run eagerly, or use torch.compile",
    "memory_snapshot": "torch.cuda.memory_stats() and memory_summary() report the device's memory",
    "gds": "GPUDirect Storage is an NVIDIA feature",
    "tunable": "TunableOp tunes CUDA/ROCm GEMMs",
    "profiler": "use torch.profiler (ProfilerActivity.CUDA is mapped to the vendor or dropped)",
    "green_contexts": "green contexts partition NVIDIA streaming multiprocessors",
}

KINDS = ("derived", "generic", "vendor", "kept", "unsupported")
__all__ = ["KINDS", "NotSupportedOnDevice", "entries", "install", "surface"]


@dataclass(frozen=True)
class Entry:
    """One public ``torch.cuda`` name: where it lives (``""`` for ``torch.cuda`` itself) and what it becomes."""

    module: str
    name: str
    kind: str

    @property
    def qualname(self) -> str:
        return f"torch.cuda.{self.module + '.' if self.module else ''}{self.name}"


def submodule(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(f"torch.cuda.{name}")
    except ImportError:
        return None


def public_names(module: types.ModuleType) -> list[str]:
    """The names ``module`` exports: its ``__all__``, else the public names it defines (not its imports)."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith("_") and not isinstance(v, types.ModuleType)
                 and getattr(v, "__module__", module.__name__) == module.__name__]
    return [n for n in names if not isinstance(getattr(module, n, None), types.ModuleType)]


_SURFACE: list[tuple[str, types.ModuleType, str]] = []


def surface() -> Iterator[tuple[str, types.ModuleType, str]]:
    """(submodule name or ``""``, module, name) for every public name of ``torch.cuda`` and its submodules. Read
    once per process, at the first call (:func:`install` makes it before replacing anything): a class the mapping
    replaced no longer looks defined in its submodule (``torch.cuda.streams.Stream``), so a later reading would
    miss it."""
    if not _SURFACE:
        _SURFACE.extend(_read_surface())
    return iter(_SURFACE)


def _read_surface() -> Iterator[tuple[str, types.ModuleType, str]]:
    top = [n for n in dir(torch.cuda) if not n.startswith("_")]
    names = sorted(set(torch.cuda.__all__) | {n for n in top if n in KEPT})
    for name in names:
        if not isinstance(getattr(torch.cuda, name, None), types.ModuleType):
            yield "", torch.cuda, name
    for sub in SUBMODULES:
        module = submodule(sub)
        if module is not None:
            for name in public_names(module):
                yield sub, module, name


def classify(name: str, vendor_module: types.ModuleType) -> str:
    """What ``name`` becomes with ``vendor_module`` as the vendor's device module (one of :data:`KINDS`)."""
    if name in ALWAYS_DERIVED:
        return "derived"
    if name in KEPT:
        return "kept"
    if hasattr(vendor_module, name):
        return "vendor"
    if name in cuda_generic.SOURCES:
        return "generic"
    if name in cuda_derived.BUILDERS:
        return "derived"
    return "unsupported"


def entries(vendor_module: types.ModuleType) -> list[Entry]:
    """Every surface name with its kind, for ``vendor_module``."""
    return [Entry(sub, name, classify(name, vendor_module)) for sub, _, name in surface()]


def _unsupported(original: Any, qualname: str, vendor: str, hint: str) -> Any:
    message = f"{qualname} is not supported on {vendor}" + (f" ({hint})" if hint else "")

    if isinstance(original, type):
        def refuse(cls: type, *args: Any, **kwargs: Any) -> Any:
            raise NotSupportedOnDevice(message)

        return mirroring(original)(original.__name__, (), {
            "__new__": refuse, "__doc__": message, "__module__": getattr(original, "__module__", "torch.cuda")})

    def unsupported(*args: Any, **kwargs: Any) -> Any:
        raise NotSupportedOnDevice(message)

    unsupported.__name__ = getattr(original, "__name__", qualname.rsplit(".", 1)[-1])
    unsupported.__qualname__ = unsupported.__name__
    unsupported.__doc__ = message
    return unsupported


def install(patches: Patches, vendor_module: types.ModuleType, tr: Translator, vendor_name: str) -> None:
    """Replace every public ``torch.cuda`` name (and its submodules') as :func:`classify` says."""
    generic = Generic(vendor_module, tr.device_type, tr, vendor_name)
    vendor = Vendor(vendor_module, tr, vendor_name, generic)
    derived = {**cuda_generic.build(generic), **cuda_derived.build_all(vendor)}
    done: dict[int, Any] = {}  # one replacement per original object, shared by every module that exports it
    for sub, module, name in list(surface()):
        kind = classify(name, vendor_module)
        if kind == "kept":
            continue
        original = getattr(module, name, None)
        key = id(original) if original is not None else hash((sub, name))
        if key not in done:
            if kind in ("derived", "generic"):
                done[key] = derived[name]
            elif kind == "vendor":
                value = getattr(vendor_module, name)
                done[key] = tr.wrap(value) if callable(value) and not isinstance(value, type) else value
            else:
                qualname = f"torch.cuda.{sub + '.' if sub else ''}{name}"
                home = sub or getattr(original, "__module__", "").rpartition("torch.cuda.")[2]
                done[key] = _unsupported(original, qualname, vendor_name, HINTS.get(name) or HINTS.get(home, ""))
            if name in cuda_generic.RNG_NAMES and kind in ("vendor", "generic"):
                done[key] = cuda_generic.follow_kernels(generic, name, done[key])
        patches.set(module, name, done[key])
    for name in PRIVATE:
        if hasattr(vendor_module, name):
            value = getattr(vendor_module, name)
            patches.set(torch.cuda, name, tr.wrap(value) if callable(value) else value)
