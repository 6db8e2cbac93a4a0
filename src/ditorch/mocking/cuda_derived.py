"""``torch.cuda`` functions that ditorch builds from the vendor module's, where the vendor has no twin of its own
or its own is not CUDA-shaped (a ``device`` that is not a class, properties without ``major``).

Each builder takes a :class:`Vendor` (the vendor's ``torch.<device>`` module, the translator, the adapter's
name) and returns the object that replaces the ``torch.cuda`` name. :data:`BUILDERS` maps the name to its
builder; :mod:`.cuda_surface` decides which names use them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.cuda

from ditorch.mocking import cuda_generic
from ditorch.mocking.cuda_generic import Generic, NotSupportedOnDevice
from ditorch.mocking.device_strings import Translator

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

#: The fields of CUDA's device properties (``torch._C._CudaDeviceProperties`` in torch 2.13); a test checks
#: the list against torch's type stubs so that new fields are noticed.
CUDA_PROPERTY_FIELDS: dict[str, Any] = {
    "name": "", "major": 0, "minor": 0, "multi_processor_count": 0, "total_memory": 0, "is_integrated": 0,
    "is_multi_gpu_board": 0, "max_threads_per_multi_processor": 0, "gcnArchName": "", "warp_size": 0, "uuid": "",
    "L2_cache_size": 0, "clock_rate": 0, "memory_clock_rate": 0, "memory_bus_width": 0,
    "shared_memory_per_block": 0, "shared_memory_per_multiprocessor": 0,
}

#: ``memory_stats`` keys CUDA's caching allocator reports for every (statistic, pool, measure).
MEMORY_STATISTICS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                     "active_bytes", "inactive_split_bytes", "requested_bytes")
MEMORY_POOLS = ("all", "large_pool", "small_pool")
MEMORY_MEASURES = ("current", "peak", "allocated", "freed")
MEMORY_UNPOOLED = ("oversize_allocations", "oversize_segments")
MEMORY_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
                   "max_split_size")


@dataclass(frozen=True)
class Vendor:
    """What a builder needs: the vendor's device module, the cuda→vendor translator, the adapter's name, and the
    generic sources (:mod:`.cuda_generic`) for what the module lacks."""

    module: ModuleType
    translator: Translator
    name: str
    generic: Generic

    def function(self, name: str) -> Callable[..., Any] | None:
        """The vendor module's function ``name``, else its generic derivation, else None."""
        own = getattr(self.module, name, None)
        if callable(own):
            return own
        builder = cuda_generic.BUILDERS.get(name)
        return builder(self.generic) if builder is not None else None

    def call(self, name: str, *args: Any, default: Any = None) -> Any:
        """``<name>(*args)`` (the vendor's or the generic one), or ``default`` when neither exists."""
        fn = self.function(name)
        return default if fn is None else fn(*args)

    def optional(self, name: str, *args: Any, default: Any = None) -> Any:
        """:meth:`call`, with ``default`` also where the device refuses (:class:`NotSupportedOnDevice`)."""
        try:
            return self.call(name, *args, default=default)
        except NotSupportedOnDevice:
            return default

    def index(self, device: Any) -> int:
        """The vendor device index meant by ``device`` (None: the current device; cuda or vendor devices)."""
        if isinstance(device, torch.cuda.device):
            return device.idx
        return self.generic.index(device)


class CudaDeviceProperties:
    """CUDA-shaped device properties: every field of CUDA's, the vendor's value where it reports one and
    ``0``/``""`` where it does not; ``major``/``minor`` from :func:`capability`. Fields the vendor reports
    beyond CUDA's are kept too. ``total_memory`` is never made up: where neither the vendor's properties nor
    ``mem_get_info`` know it, reading it raises :class:`NotSupportedOnDevice` (code divides by it)."""

    def __init__(self, fields: dict[str, Any], unknown: dict[str, str] | None = None) -> None:
        self.__dict__.update(fields)
        self._unknown = unknown or {}

    def __getattr__(self, name: str) -> Any:  # only for fields not set: the unknown ones
        unknown = self.__dict__.get("_unknown", {})
        if name in unknown:
            raise NotSupportedOnDevice(unknown[name])
        raise AttributeError(name)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if k in CUDA_PROPERTY_FIELDS)
        return f"_CudaDeviceProperties({shown})"


def capability(vendor: Vendor, properties: Any) -> tuple[int, int]:
    """The vendor's own ``major``/``minor`` when it reports them; otherwise the CUDA capability whose dtype
    features the device has: (8, 0) with bfloat16, (7, 0) with float16 only, (6, 0) with neither."""
    major = getattr(properties, "major", None)
    if isinstance(major, int):
        return major, int(getattr(properties, "minor", 0) or 0)
    if vendor.call("is_bf16_supported", default=False):
        return 8, 0
    amp = vendor.call("get_amp_supported_dtype", default=None)
    amp = cuda_generic.autocast_dtypes(vendor.translator.device_type) if amp is None else amp
    return (7, 0) if torch.float16 in amp else (6, 0)


def _properties(vendor: Vendor) -> Callable[..., CudaDeviceProperties]:
    def get_device_properties(device: Any = None) -> CudaDeviceProperties:
        """The vendor device's properties with CUDA's fields (see :class:`CudaDeviceProperties`)."""
        index = vendor.index(device)
        count = int(vendor.call("device_count", default=1))
        if not 0 <= index < count:
            raise AssertionError(f"Invalid device id {index}: {vendor.name} has {count} device(s)")
        own_properties = getattr(vendor.module, "get_device_properties", None)
        own = own_properties(index) if own_properties is not None else None
        fields = dict(CUDA_PROPERTY_FIELDS)
        fields.update({k: v for k, v in _attributes(own).items() if not k.startswith("_")})
        fields["major"], fields["minor"] = capability(vendor, own)
        if not fields["name"]:
            fields["name"] = str(vendor.call("get_device_name", index))
        unknown = {}
        if not fields["total_memory"]:
            fields["total_memory"] = int(vendor.optional("mem_get_info", index, default=(0, 0))[1])
        if not fields["total_memory"]:
            del fields["total_memory"]
            unknown["total_memory"] = (f"torch.cuda.get_device_properties({index}).total_memory is not known on "
                                       f"{vendor.name}: it reports neither properties nor mem_get_info")
        return CudaDeviceProperties(fields, unknown)

    return get_device_properties


def _attributes(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if hasattr(obj, "__dict__") and vars(obj):
        return dict(vars(obj))
    return {k: getattr(obj, k) for k in dir(obj) if not k.startswith("_") and not callable(getattr(obj, k))}


def _capability(vendor: Vendor) -> Callable[..., tuple[int, int]]:
    properties = _properties(vendor)

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        """(major, minor) of the device: see :func:`capability`."""
        p = properties(device)
        return p.major, p.minor

    return get_device_capability


def _device_class(vendor: Vendor) -> type:
    base = torch.cuda.device  # the original class: isinstance checks against it keep holding

    class device(base):  # noqa: N801  (torch.cuda's name)
        """Context manager that makes ``device`` the current one (a cuda or vendor device, an index; None or a
        negative index: no change), as ``torch.cuda.device``."""

        def __init__(self, device: Any) -> None:
            self.idx = -1 if device is None else vendor.index(device)
            self.prev_idx = -1

        def __enter__(self) -> None:
            if self.idx >= 0:
                self.prev_idx = vendor.index(None)
                if self.prev_idx != self.idx:
                    vendor.call("set_device", self.idx)

        def __exit__(self, *exc: Any) -> bool:
            if self.idx >= 0 and self.prev_idx != self.idx:
                vendor.call("set_device", self.prev_idx)
            return False

    device.__module__ = "torch.cuda"
    return device


def _device_of(vendor: Vendor, device_class: type) -> type:
    class device_of(device_class):  # noqa: N801
        """``torch.cuda.device_of(tensor)``: the tensor's device for the block (no change for CPU tensors)."""

        def __init__(self, obj: Any) -> None:
            on_device = obj.device.type == vendor.translator.device_type
            super().__init__(obj.get_device() if on_device else -1)

    device_of.__module__ = "torch.cuda"
    return device_of


def memory_stats_from(vendor: Vendor, device: Any) -> dict[str, int]:
    """CUDA's flat ``memory_stats`` dict: every key CUDA reports (0 for the counters the device does not keep), the
    byte counters filled from the device's allocated/reserved figures (the vendor's, else ``torch.accelerator``'s),
    then the device's own statistics on top (the vendor's ``memory_stats``, else ``torch.accelerator``'s). A device
    that keeps no figure at all raises :class:`NotSupportedOnDevice`: never zeros beside a live tensor."""
    index = vendor.index(device)
    stats = {f"{s}.{p}.{m}": 0 for s in MEMORY_STATISTICS for p in MEMORY_POOLS for m in MEMORY_MEASURES}
    stats.update({f"{s}.{m}": 0 for s in MEMORY_UNPOOLED for m in MEMORY_MEASURES})
    stats.update(dict.fromkeys(MEMORY_COUNTERS, 0))
    allocated = vendor.call("memory_allocated", index)  # raises where the device keeps no statistics
    peak = vendor.optional("max_memory_allocated", index, default=allocated)
    reserved = vendor.optional("memory_reserved", index, default=allocated)
    reserved_peak = vendor.optional("max_memory_reserved", index, default=max(reserved, peak))
    for name in ("allocated_bytes", "active_bytes", "requested_bytes"):
        stats[f"{name}.all.current"], stats[f"{name}.all.peak"] = allocated, peak
    stats["reserved_bytes.all.current"], stats["reserved_bytes.all.peak"] = reserved, reserved_peak
    own = getattr(vendor.module, "memory_stats", None)
    if own is not None:
        own_stats = own(index) or {}
    else:
        try:
            own_stats = dict(torch.accelerator.memory_stats(index))
        except (RuntimeError, NotImplementedError, AttributeError):
            own_stats = {}
    stats.update({k: v for k, v in own_stats.items() if isinstance(v, int | float)})
    return dict(sorted(stats.items()))


def _memory_stats(vendor: Vendor) -> Callable[..., dict[str, int]]:
    def memory_stats(device: Any = None) -> dict[str, int]:
        """The device's memory statistics under CUDA's keys (see :func:`memory_stats_from`)."""
        return memory_stats_from(vendor, device)

    return memory_stats


def _memory_stats_nested(vendor: Vendor) -> Callable[..., dict[str, Any]]:
    def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
        """:func:`memory_stats` with its dotted keys as nested dicts, as CUDA's."""
        nested: dict[str, Any] = {}
        for key, value in memory_stats_from(vendor, device).items():
            *path, last = key.split(".")
            node = nested
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        return nested

    return memory_stats_as_nested_dict


def _alias(vendor_name: str) -> Callable[[Vendor], Callable[..., Any]]:
    """A legacy CUDA name for a vendor function (``memory_cached`` → ``memory_reserved``)."""

    def build(vendor: Vendor) -> Callable[..., Any]:
        def alias(*args: Any, **kwargs: Any) -> Any:
            fn = vendor.function(vendor_name)
            if fn is None:
                raise NotSupportedOnDevice(f"torch.cuda's {vendor_name} is not supported on {vendor.name}")
            return fn(*args, **kwargs)

        alias.__doc__ = f"The vendor's ``{vendor_name}`` (CUDA's older name for it)."
        return vendor.translator.wrap(alias)

    return build


def _constant(value: Any, doc: str) -> Callable[[Vendor], Callable[..., Any]]:
    def build(vendor: Vendor) -> Callable[..., Any]:
        def constant(*args: Any, **kwargs: Any) -> Any:
            return value() if callable(value) else value

        constant.__doc__ = doc
        return constant

    return build


def _device_memory_used(vendor: Vendor) -> Callable[..., int]:
    def device_memory_used(device: Any = None) -> int:
        """Bytes in use on the device (total minus free, from ``mem_get_info``)."""
        free, total = vendor.call("mem_get_info", vendor.index(device))
        return int(total - free)

    return device_memory_used


def _list_gpu_processes(vendor: Vendor) -> Callable[..., str]:
    def list_gpu_processes(device: Any = None) -> str:
        """This process and the memory it holds on the device (the vendor does not list other processes)."""
        index = vendor.index(device)
        reserved = vendor.call("memory_reserved", index)
        return f"{vendor.translator.device_type}:{index}\nprocess {os.getpid():>10d} uses {reserved / 2**20:12.3f} MB"

    return list_gpu_processes


def _can_device_access_peer(vendor: Vendor) -> Callable[..., bool]:
    def can_device_access_peer(device: Any, peer_device: Any) -> bool:
        """False: the vendor reports no peer-to-peer access (both devices are checked to exist)."""
        count = int(vendor.call("device_count", default=1))
        for d in (vendor.index(device), vendor.index(peer_device)):
            if not 0 <= d < count:
                raise AssertionError(f"Invalid device id {d}: {vendor.name} has {count} device(s)")
        return False

    return can_device_access_peer


def _set_sync_debug_mode(vendor: Vendor) -> Callable[..., None]:
    def set_sync_debug_mode(debug_mode: int | str) -> None:
        """Only the default mode (0, ``"default"``) exists on the vendor's device."""
        if debug_mode not in (0, "default"):
            raise NotSupportedOnDevice(f"torch.cuda.set_sync_debug_mode({debug_mode!r}) is not supported on "
                                       f"{vendor.name}: it has no synchronization debug mode")

    return set_sync_debug_mode


# -- nvtx: ranges become profiler annotations (record_function), which is what they are for ----------------------

_RANGES = threading.local()


def _stack() -> list[Any]:
    if not hasattr(_RANGES, "stack"):
        _RANGES.stack, _RANGES.started = [], {}
    return _RANGES.stack


def _nvtx_range_push(vendor: Vendor) -> Callable[[str], int]:
    def range_push(msg: str) -> int:
        """Open a named range (a ``torch.profiler.record_function`` annotation); returns its depth."""
        stack = _stack()
        stack.append(torch.autograd.profiler.record_function(msg).__enter__())
        return len(stack) - 1

    return range_push


def _nvtx_range_pop(vendor: Vendor) -> Callable[[], int]:
    def range_pop() -> int:
        """Close the innermost range opened by ``range_push``; returns its depth (-1 if none was open)."""
        stack = _stack()
        if not stack:
            return -1
        stack.pop().__exit__(None, None, None)
        return len(stack)

    return range_pop


def _nvtx_range_start(vendor: Vendor) -> Callable[[str], int]:
    def range_start(msg: str) -> int:
        """Open a range that may end on another thread's call to ``range_end``; returns its id."""
        _stack()
        rf = torch.autograd.profiler.record_function(msg).__enter__()
        _RANGES.started[id(rf)] = rf
        return id(rf)

    return range_start


def _nvtx_range_end(vendor: Vendor) -> Callable[[int], None]:
    def range_end(range_id: int) -> None:
        """Close the range ``range_start`` returned."""
        _stack()
        rf = _RANGES.started.pop(range_id, None)
        if rf is not None:
            rf.__exit__(None, None, None)

    return range_end


def _nvtx_mark(vendor: Vendor) -> Callable[[str], None]:
    def mark(msg: str) -> None:
        """An instantaneous annotation (an empty ``record_function``)."""
        with torch.autograd.profiler.record_function(msg):
            pass

    return mark


def _nvtx_range(vendor: Vendor) -> Callable[..., Any]:
    push, pop = _nvtx_range_push(vendor), _nvtx_range_pop(vendor)

    @contextlib.contextmanager
    def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:  # noqa: A001  (nvtx's name)
        """``with torch.cuda.nvtx.range("step"):`` a profiler annotation around the block."""
        push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            pop()

    return range


def _amp_not_available(vendor: Vendor) -> Callable[[], bool]:
    def amp_definitely_not_available() -> bool:
        """False when the vendor's device is available (autocast works on it)."""
        return not vendor.call("is_available", default=False)

    return amp_definitely_not_available


def _init(vendor: Vendor) -> Callable[[], None]:
    def init() -> None:
        """Initialise the vendor's runtime (its ``init`` or ``_lazy_init`` when it has one)."""
        fn = getattr(vendor.module, "init", None) or getattr(vendor.module, "_lazy_init", None)
        if fn is not None:
            fn()

    return init


def build_all(vendor: Vendor) -> dict[str, Any]:
    """Every derived object, by its ``torch.cuda`` name."""
    device_class = _device_class(vendor)
    built: dict[str, Any] = {"device": device_class, "device_of": _device_of(vendor, device_class)}
    for name, builder in BUILDERS.items():
        built[name] = builder(vendor)
    return built


BUILDERS: dict[str, Callable[[Vendor], Any]] = {
    "get_device_properties": _properties,
    "get_device_capability": _capability,
    "memory_stats": _memory_stats,
    "memory_stats_as_nested_dict": _memory_stats_nested,
    "memory_cached": _alias("memory_reserved"),
    "max_memory_cached": _alias("max_memory_reserved"),
    "reset_max_memory_cached": _alias("reset_peak_memory_stats"),
    "reset_max_memory_allocated": _alias("reset_peak_memory_stats"),
    "device_memory_used": _device_memory_used,
    "list_gpu_processes": _list_gpu_processes,
    "can_device_access_peer": _can_device_access_peer,
    "set_sync_debug_mode": _set_sync_debug_mode,
    "get_sync_debug_mode": _constant(0, "0: the vendor's device has no synchronization debug mode."),
    "is_current_stream_capturing": _constant(False, "False: no graph capture on the vendor's device."),
    "get_arch_list": _constant(list, "[]: no CUDA architectures are compiled in."),
    "get_gencode_flags": _constant("", "'': no CUDA architectures are compiled in."),
    "get_allocator_backend": _constant("native", "'native': the vendor's own allocator."),
    "get_per_process_memory_fraction": _constant(1.0, "1.0: the process may use the whole device."),
    "is_tf32_supported": _constant(False, "False: TF32 is an NVIDIA format."),
    "ipc_collect": _constant(None, "Nothing to collect: the vendor's device shares no memory over CUDA IPC."),
    "is_initialized": _constant(True, "True: the vendor's runtime is initialised when ditorch imports it."),
    "init": _init,
    "amp_definitely_not_available": _amp_not_available,
    "range_push": _nvtx_range_push,
    "range_pop": _nvtx_range_pop,
    "range_start": _nvtx_range_start,
    "range_end": _nvtx_range_end,
    "mark": _nvtx_mark,
    "range": _nvtx_range,
    "is_enabled": _constant(False, "False: TunableOp does not run on the vendor's device."),
    "tuning_is_enabled": _constant(False, "False: TunableOp does not run on the vendor's device."),
    "record_untuned_is_enabled": _constant(False, "False: TunableOp does not run on the vendor's device."),
}

#: name -> what ditorch builds it from, for the docs and ``ditorch info --probe`` (docs/ditorch.md has the same
#: table; a test compares them).
SOURCES: dict[str, str] = {
    "device": "a context-manager class over set_device/current_device (cuda or vendor devices, indices)",
    "device_of": "torch.cuda.device of a tensor's device (no change for CPU tensors)",
    "get_device_properties": "every field of CUDA's: the vendor's properties, get_device_name, mem_get_info, the "
                             "capability rule; total_memory raises where nothing knows it",
    "get_device_capability": "the vendor's major/minor, else (8, 0) with bfloat16, (7, 0) with float16 only, (6, 0)",
    "memory_stats": "CUDA's keys: byte counters from memory_allocated/reserved (and peaks), the device's own "
                    "statistics on top; raises where the device keeps none",
    "memory_stats_as_nested_dict": "memory_stats, nested",
    "memory_cached": "memory_reserved (CUDA's older name)",
    "max_memory_cached": "max_memory_reserved (CUDA's older name)",
    "reset_max_memory_cached": "reset_peak_memory_stats (CUDA's older name)",
    "reset_max_memory_allocated": "reset_peak_memory_stats (CUDA's older name)",
    "device_memory_used": "mem_get_info: total minus free",
    "list_gpu_processes": "this process and its memory_reserved",
    "can_device_access_peer": "False (both devices checked to exist)",
    "set_sync_debug_mode": "only the default mode (0) is accepted",
    "get_sync_debug_mode": "0",
    "is_current_stream_capturing": "False",
    "get_arch_list": "[]",
    "get_gencode_flags": "''",
    "get_allocator_backend": "'native'",
    "get_per_process_memory_fraction": "1.0",
    "is_tf32_supported": "False",
    "ipc_collect": "nothing to collect",
    "is_initialized": "True",
    "init": "the vendor's init or _lazy_init",
    "amp_definitely_not_available": "not is_available()",
    "range_push": "torch.profiler record_function",
    "range_pop": "torch.profiler record_function",
    "range_start": "torch.profiler record_function",
    "range_end": "torch.profiler record_function",
    "mark": "torch.profiler record_function",
    "range": "torch.profiler record_function",
    "is_enabled": "False (TunableOp)",
    "tuning_is_enabled": "False (TunableOp)",
    "record_untuned_is_enabled": "False (TunableOp)",
}
