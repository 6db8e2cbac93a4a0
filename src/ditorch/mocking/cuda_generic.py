"""``torch.cuda`` names derived from PyTorch's device-generic APIs, for a vendor module that lacks them.

Every mapped name resolves, in this order (:mod:`.cuda_surface` applies it): the vendor module's object of the same
name; else the generic source below (:data:`SOURCES` says which, docs/ditorch.md prints the same table); else a
CUDA-shaped builder of :mod:`.cuda_derived`; else :class:`NotSupportedOnDevice` naming the function and the vendor.

A generic source is PyTorch's own device-generic API: ``torch.accelerator`` (device count and selection,
synchronization, streams, memory statistics), ``torch.Stream`` / ``torch.Event`` (streams and events through the
plugin's C++ device guard), autocast (the dtypes the plugin's autocast accepts), the vendor module's
``default_generators`` (the RNG), and the vendor's own functions combined (``seed`` from ``manual_seed``). Never a
made-up value: where the plugin cannot answer (its allocator keeps no statistics), the call raises
:class:`NotSupportedOnDevice` with the plugin's own reason.
"""

from __future__ import annotations

import functools
import random
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

from diopi.privateuse1 import accelerator_serves
from ditorch.mocking.device_strings import Translator

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

__all__ = ["SOURCES", "Generic", "NotSupportedOnDevice", "build"]


class NotSupportedOnDevice(NotImplementedError):
    """A ``torch.cuda`` function or class that the vendor's device has no counterpart for."""


#: Words in a plugin's error that mean "this plugin does not implement that" (not a wrong argument).
_NOT_IMPLEMENTED = ("not a deviceallocator", "not implemented", "not supported", "doesn't support", "does not support",
                    "not available for")


class Generic:
    """The generic sources for one vendor: its device module (``vendor``), device type and translator; builds
    each function on demand and remembers what the plugin turned out not to support."""

    def __init__(self, vendor_module: Any, device_type: str, translator: Translator, vendor_name: str) -> None:
        self.module = vendor_module
        self.device_type = device_type
        self.translator = translator
        self.vendor_name = vendor_name
        #: streams made through ``torch.cuda.Stream`` (synchronize's fallback waits for each of them)
        self.streams: weakref.WeakSet[torch.Stream] = weakref.WeakSet()

    # -- helpers -------------------------------------------------------------------------------------------------
    def own(self, name: str) -> Callable[..., Any] | None:
        """The vendor module's function ``name``, or None."""
        fn = getattr(self.module, name, None)
        return fn if callable(fn) else None

    def index(self, device: Any = None) -> int:
        """The device index meant by ``device`` (None: the current device; ints, cuda or vendor devices)."""
        if device is None:
            return self.current_device()
        if isinstance(device, int):
            return device
        if hasattr(device, "idx") and isinstance(device.idx, int):  # torch.cuda.device(...)
            return device.idx
        device = torch.device(self.translator.device(device))
        if device.type != self.device_type:
            raise ValueError(f"expected a {self.device_type} (or cuda) device, got {device}")
        return self.current_device() if device.index is None else device.index

    def current_device(self) -> int:
        """The vendor's ``current_device()``, else ``torch.accelerator``'s (:func:`resolved`)."""
        return int(resolved(self, "current_device")())

    def draws_from_cpu(self) -> bool:
        """Whether the plugin's random kernels draw from the CPU's default generator (found once, by one draw)."""
        if self.device_type == "cpu":
            return False  # cuda mapped onto the CPU: its seeding functions are the mapping's own
        from op_tools.device_random import draws_from_cpu

        return draws_from_cpu(self.device_type, self.current_device(), self.module)

    def device(self, device: Any = None) -> torch.device:
        return torch.device(self.device_type, self.index(device))

    def accelerator(self, qualname: str) -> None:
        """Refuse ``torch.cuda.<qualname>`` unless ``torch.accelerator`` serves this device type (it serves one
        accelerator per process: another plugin's, or none when cuda is mapped onto the CPU)."""
        if not accelerator_serves(self.device_type):
            current = torch.accelerator.current_accelerator()
            serves = f"serves {current.type}" if current is not None else "has no accelerator"
            raise self.refuse(qualname, f"torch.accelerator {serves}, not {self.device_type}")

    def refuse(self, qualname: str, why: str) -> NotSupportedOnDevice:
        return NotSupportedOnDevice(f"torch.cuda.{qualname} is not supported on {self.vendor_name} ({why})")

    def call_plugin(self, qualname: str, source: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; an error of the plugin that means "not implemented" becomes :class:`NotSupportedOnDevice`
        naming ``torch.cuda.<qualname>``, the generic ``source`` tried, and the plugin's own words."""
        try:
            return fn(*args)
        except (RuntimeError, NotImplementedError) as exc:
            text = " ".join(str(exc).split())
            if isinstance(exc, NotImplementedError) or any(w in text.lower() for w in _NOT_IMPLEMENTED):
                short = text.split(" please report a bug to PyTorch. ")[-1][:200]
                raise self.refuse(qualname, f"{source} raised: {short}") from None
            raise


# -- device selection --------------------------------------------------------------------------------------------

def _is_available(g: Generic) -> Callable[[], bool]:
    def is_available() -> bool:
        """Whether the device can be used (``torch.accelerator`` with this device type current)."""
        return accelerator_serves(g.device_type) and torch.accelerator.is_available()

    return is_available


def _device_count(g: Generic) -> Callable[[], int]:
    def device_count() -> int:
        """``torch.accelerator.device_count()``."""
        g.accelerator("device_count")
        return torch.accelerator.device_count()

    return device_count


def _current_device(g: Generic) -> Callable[[], int]:
    def current_device() -> int:
        """``torch.accelerator.current_device_index()``."""
        g.accelerator("current_device")
        return torch.accelerator.current_device_index()

    return current_device


def _set_device(g: Generic) -> Callable[[Any], None]:
    def set_device(device: Any) -> None:
        """``torch.accelerator.set_device_index`` (a negative index: no change)."""
        index = g.index(device)
        g.accelerator("set_device")
        if index >= 0:
            torch.accelerator.set_device_index(index)

    return set_device


# -- synchronization, streams, events ------------------------------------------------------------------------------

def _synchronize(g: Generic) -> Callable[..., None]:
    def synchronize(device: Any = None) -> None:
        """Wait for all work on the device: ``torch.accelerator.synchronize`` (the plugin's device guard). Where the
        plugin's guard fails at that, wait for each stream instead: the device's current stream and every stream
        made through ``torch.cuda.Stream`` (:class:`op_tools.device_sync.AcceleratorSync`)."""
        from op_tools.device_sync import accelerator_sync  # the one implementation, shared with op_tools' timing

        index = g.index(device)
        g.accelerator("synchronize")
        accelerator_sync(g.device_type)(index, [s for s in list(g.streams) if s.device_index == index])

    return synchronize


def _stream_class(g: Generic) -> type:
    base = torch.Stream

    class Stream(base):
        """``torch.cuda.Stream(device=None, priority=0)``: a stream of the vendor's device (``torch.Stream``
        through the plugin's device guard)."""

        def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
            if {"stream_id", "device_index", "device_type"} <= kwargs.keys():  # wrapping an existing stream
                stream = base.__new__(cls, stream_id=kwargs["stream_id"], device_index=kwargs["device_index"],
                                      device_type=kwargs["device_type"], priority=priority)
            else:
                stream = base.__new__(cls, device=g.device(device), priority=priority)
            g.streams.add(stream)
            return stream

        @property
        def cuda_stream(self) -> int:
            """The stream's native handle (CUDA code passes it to native libraries)."""
            return self.native_handle

        def __repr__(self) -> str:
            return f"<torch.cuda.Stream device={self.device} stream_id={self.stream_id}>"

    Stream.__module__ = "torch.cuda"
    return Stream


def as_stream(stream_class: type, stream: torch.Stream) -> torch.Stream:
    """``stream`` as an instance of the mapped ``torch.cuda.Stream`` class (the same stream)."""
    if isinstance(stream, stream_class):
        return stream
    return stream_class(stream_id=stream.stream_id, device_index=stream.device_index,
                        device_type=stream.device_type)


def _current_stream(g: Generic, stream_class: type) -> Callable[..., torch.Stream]:
    def current_stream(device: Any = None) -> torch.Stream:
        """``torch.accelerator.current_stream`` as a ``torch.cuda.Stream``."""
        g.accelerator("current_stream")
        return as_stream(stream_class, torch.accelerator.current_stream(g.index(device)))

    return current_stream


def _set_stream(g: Generic) -> Callable[[Any], None]:
    def set_stream(stream: Any) -> None:
        """``torch.accelerator.set_stream`` (None: no change)."""
        g.accelerator("set_stream")
        if stream is not None:
            torch.accelerator.set_stream(stream)

    return set_stream


def _stream_context(g: Generic) -> Callable[[Any], Any]:
    def stream(stream: Any) -> Any:
        """``with torch.cuda.stream(s):`` makes ``s`` current for the block (PyTorch's ``StreamContext``)."""
        return torch.cuda.StreamContext(stream)

    return stream


def _event_class(g: Generic) -> type:
    base = torch.Event

    class EventType(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, base) and obj.device.type == g.device_type

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, base)

    class Event(metaclass=EventType):
        """``torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False)``: a ``torch.Event`` of the
        vendor's device (``record``, ``wait``, ``query``, ``synchronize``, ``elapsed_time`` through the plugin's
        device guard). PyTorch's events take no subclass (``elapsed_time`` checks the exact type), so this class
        makes plain ``torch.Event`` objects and ``isinstance(e, torch.cuda.Event)`` holds for them."""

        def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                    external: bool = False) -> torch.Event:  # type: ignore[misc]
            if external:
                raise g.refuse("Event(external=True)", "external events are CUDA graph events")
            return base(device=g.device(None), enable_timing=enable_timing, blocking=blocking,
                        interprocess=interprocess)

    Event.__module__ = "torch.cuda"
    return Event


# -- memory --------------------------------------------------------------------------------------------------------

def _memory(name: str, accelerator_name: str) -> Callable[[Generic], Callable[..., Any]]:
    def build(g: Generic) -> Callable[..., Any]:
        source = f"torch.accelerator.{accelerator_name}"
        fn = getattr(torch.accelerator, accelerator_name, None)

        def memory(device: Any = None) -> Any:
            g.accelerator(name)
            if fn is None:
                raise g.refuse(name, f"{source} does not exist in torch {torch.__version__}")
            return g.call_plugin(name, source, fn, g.index(device))

        memory.__name__ = memory.__qualname__ = name
        memory.__doc__ = f"``{source}`` of the device (raises NotSupportedOnDevice where the plugin keeps none)."
        return memory

    return build


def _empty_cache(g: Generic) -> Callable[[], None]:
    def empty_cache() -> None:
        """``torch.accelerator.empty_cache()``; a plugin whose allocator caches nothing has nothing to release."""
        try:
            g.accelerator("empty_cache")
            g.call_plugin("empty_cache", "torch.accelerator.empty_cache", torch.accelerator.empty_cache)
        except NotSupportedOnDevice:
            return

    return empty_cache


# -- names, dtypes -------------------------------------------------------------------------------------------------

def _get_device_name(g: Generic) -> Callable[..., str]:
    def get_device_name(device: Any = None) -> str:
        """The name in the vendor's device properties when it reports one, else the device type."""
        props = g.own("get_device_properties")
        name = getattr(props(g.index(device)), "name", None) if props is not None else None
        return str(name) if name else g.device_type

    return get_device_name


def autocast_dtypes(device_type: str) -> list[torch.dtype]:
    """The floating dtypes PyTorch's autocast accepts on ``device_type`` (it disables itself, with a warning,
    for the others): what the plugin declares it computes in reduced precision."""
    accepted = []
    for dtype in (torch.float16, torch.bfloat16):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if torch.amp.autocast(device_type, dtype=dtype, enabled=True)._enabled:
                    accepted.append(dtype)
            except (RuntimeError, ValueError, AttributeError):
                continue
    return accepted


def _is_bf16_supported(g: Generic) -> Callable[..., bool]:
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        """Whether bfloat16 is among the dtypes the plugin's autocast accepts."""
        return torch.bfloat16 in autocast_dtypes(g.device_type)

    return is_bf16_supported


# -- random numbers ------------------------------------------------------------------------------------------------

def _generator(g: Generic, qualname: str, index: int) -> torch.Generator:
    generators = getattr(g.module, "default_generators", None)
    if not generators:
        raise g.refuse(qualname, "the vendor module has neither this function nor default_generators")
    return generators[index]


def _manual_seed(g: Generic) -> Callable[[int], None]:
    def manual_seed(seed: int) -> None:
        """Seed the current device's default generator (the vendor module's ``default_generators``)."""
        _generator(g, "manual_seed", g.current_device()).manual_seed(int(seed))

    return manual_seed


def _manual_seed_all(g: Generic) -> Callable[[int], None]:
    def manual_seed_all(seed: int) -> None:
        """Seed every device: the vendor's ``manual_seed`` on each, or each default generator."""
        own, seed = g.own("manual_seed"), int(seed)
        count, current, select = resolved(g, "device_count")(), g.current_device(), resolved(g, "set_device")
        for index in range(count):
            if own is not None:
                select(index)
                try:
                    own(seed)
                finally:
                    select(current)
            else:
                _generator(g, "manual_seed_all", index).manual_seed(seed)

    return manual_seed_all


def _seed(g: Generic) -> Callable[[], None]:
    def seed() -> None:
        """Seed the current device with a random number (the vendor's or the derived ``manual_seed``)."""
        resolved(g, "manual_seed")(random.getrandbits(63))

    return seed


def _seed_all(g: Generic) -> Callable[[], None]:
    def seed_all() -> None:
        """Seed every device with one random number."""
        resolved(g, "manual_seed_all")(random.getrandbits(63))

    return seed_all


def _initial_seed(g: Generic) -> Callable[[], int]:
    def initial_seed() -> int:
        """The current device's default generator's initial seed."""
        return _generator(g, "initial_seed", g.current_device()).initial_seed()

    return initial_seed


def _get_rng_state(g: Generic) -> Callable[..., torch.Tensor]:
    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        """The device's default generator's state."""
        return _generator(g, "get_rng_state", g.index(device)).get_state()

    return get_rng_state


def _set_rng_state(g: Generic) -> Callable[..., None]:
    def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        """Set the device's default generator's state."""
        _generator(g, "set_rng_state", g.index(device)).set_state(new_state)

    return set_rng_state


def _get_rng_state_all(g: Generic) -> Callable[[], list[torch.Tensor]]:
    def get_rng_state_all() -> list[torch.Tensor]:
        """Every device's RNG state (``get_rng_state`` per device)."""
        get = resolved(g, "get_rng_state")
        return [get(index) for index in range(resolved(g, "device_count")())]

    return get_rng_state_all


def _set_rng_state_all(g: Generic) -> Callable[[Any], None]:
    def set_rng_state_all(new_states: Any) -> None:
        """Set each device's RNG state (``set_rng_state`` per device)."""
        put = resolved(g, "set_rng_state")
        for index, state in enumerate(new_states):
            put(state, index)

    return set_rng_state_all


# -- random numbers where the plugin's kernels draw from the CPU's generator ---------------------------------------

def _cpu_generator_functions(g: Generic) -> dict[str, Callable[..., Any]]:
    """The RNG functions over the CPU's default generator, for a plugin whose random kernels draw from it."""
    cpu = torch.default_generator

    def count() -> int:
        return int(resolved(g, "device_count")())

    def set_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        cpu.set_state(new_state.cpu())

    def set_all(new_states: Any) -> None:
        for state in list(new_states)[:1]:  # one generator behind every device
            cpu.set_state(state.cpu())

    return {
        "manual_seed": lambda seed: cpu.manual_seed(int(seed)) and None,
        "manual_seed_all": lambda seed: cpu.manual_seed(int(seed)) and None,
        "seed": lambda: cpu.seed() and None,
        "seed_all": lambda: cpu.seed() and None,
        "initial_seed": cpu.initial_seed,
        "get_rng_state": lambda device="cuda": cpu.get_state(),
        "set_rng_state": set_state,
        "get_rng_state_all": lambda: [cpu.get_state() for _ in range(count())],
        "set_rng_state_all": set_all,
    }


#: The RNG names that follow the generator the plugin's random kernels really draw from.
RNG_NAMES = ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
             "get_rng_state_all", "set_rng_state_all")


def follow_kernels(g: Generic, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (the vendor's or the generic RNG function ``name``), or, for a plugin whose random kernels draw from
    the CPU's default generator (its own generator is never used), the same function over the CPU's generator:
    ``torch.cuda.manual_seed`` then makes the device's draws reproducible, as on CUDA. Found at the first call
    (:func:`op_tools.device_random.draws_from_cpu`: one draw on the device)."""
    state: dict[str, Callable[..., Any]] = {}

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        chosen = state.get("fn")
        if chosen is None:
            chosen = state["fn"] = _cpu_generator_functions(g)[name] if g.draws_from_cpu() else fn
        return chosen(*args, **kwargs)

    return call


def resolved(g: Generic, name: str) -> Callable[..., Any]:
    """The vendor's function ``name``, else its generic derivation."""
    own = g.own(name)
    return own if own is not None else BUILDERS[name](g)


#: name -> (builder, the generic source it uses); docs/ditorch.md has the same table (a test compares them).
TABLE: dict[str, tuple[Callable[..., Any], str]] = {
    "is_available": (_is_available, "torch.accelerator.is_available() with this device type current"),
    "device_count": (_device_count, "torch.accelerator.device_count()"),
    "current_device": (_current_device, "torch.accelerator.current_device_index()"),
    "set_device": (_set_device, "torch.accelerator.set_device_index()"),
    "synchronize": (_synchronize, "torch.accelerator.synchronize() (the plugin's device guard); where that fails, "
                                  "each stream: the current one and every torch.cuda.Stream made"),
    "current_stream": (None, "torch.accelerator.current_stream(), as a torch.cuda.Stream"),
    "set_stream": (_set_stream, "torch.accelerator.set_stream()"),
    "stream": (_stream_context, "torch.cuda.StreamContext over the mapped current_stream/set_stream"),
    "Stream": (None, "a torch.Stream subclass on the device (the plugin's device guard)"),
    "Event": (None, "torch.Event on the device (timing through the plugin's device guard; isinstance holds)"),
    **{name: (_memory(name, source), f"torch.accelerator.{source}()") for name, source in (
        ("memory_allocated", "memory_allocated"), ("max_memory_allocated", "max_memory_allocated"),
        ("memory_reserved", "memory_reserved"), ("max_memory_reserved", "max_memory_reserved"),
        ("reset_peak_memory_stats", "reset_peak_memory_stats"),
        ("reset_accumulated_memory_stats", "reset_accumulated_memory_stats"), ("mem_get_info", "get_memory_info"))},
    "empty_cache": (_empty_cache, "torch.accelerator.empty_cache() (nothing to release where the plugin caches "
                                  "nothing)"),
    "get_device_name": (_get_device_name, "the name in the vendor's get_device_properties, else the device type"),
    "is_bf16_supported": (_is_bf16_supported, "bfloat16 among the dtypes the plugin's autocast accepts"),
    "manual_seed": (_manual_seed, "the vendor module's default_generators"),
    "manual_seed_all": (_manual_seed_all, "the vendor's manual_seed on each device, else default_generators"),
    "seed": (_seed, "manual_seed with a random number"),
    "seed_all": (_seed_all, "manual_seed_all with a random number"),
    "initial_seed": (_initial_seed, "the vendor module's default_generators"),
    "get_rng_state": (_get_rng_state, "the vendor module's default_generators"),
    "set_rng_state": (_set_rng_state, "the vendor module's default_generators"),
    "get_rng_state_all": (_get_rng_state_all, "get_rng_state on each device"),
    "set_rng_state_all": (_set_rng_state_all, "set_rng_state on each device"),
}
BUILDERS: dict[str, Callable[[Generic], Any]] = {name: b for name, (b, _) in TABLE.items() if b is not None}
#: name -> the generic source, for the docs and ``ditorch info --probe``.
SOURCES: dict[str, str] = {name: source for name, (_, source) in TABLE.items()}


def build(g: Generic) -> dict[str, Any]:
    """Every generic derivation for ``g``, by its ``torch.cuda`` name."""
    stream_class = _stream_class(g)
    built: dict[str, Any] = {name: builder(g) for name, builder in BUILDERS.items()}
    built.update(Stream=stream_class, Event=_event_class(g), current_stream=_current_stream(g, stream_class))
    return built
