"""``ditorch info --probe``: run every mapped ``torch.cuda`` name, and a few CUDA idioms, on the active plugin.

The contract. One row per check, ``name | kind | result | detail``; ``kind`` is the name's kind in
:mod:`ditorch.mocking.cuda_surface` (``vendor``, ``generic``, ``derived``, ``kept``, ``unsupported``; ``idiom`` for
the idioms of :mod:`ditorch.probe_idioms`) and ``result`` one of:

- ``native``: the plugin's own function (kind ``vendor``) answered, and the answer passed its check;
- ``derived``: ditorch's object (kinds ``generic``, ``derived``, ``kept``) answered and passed. An idiom is
  ``native`` when every ``torch.cuda`` name it uses is the plugin's own (and ditorch supplies nothing else it
  needs, such as the default ``torch.compile`` backend), else ``derived``;
- ``unsupported``: a clear refusal, :class:`~ditorch.mocking.cuda_surface.NotSupportedOnDevice` (the names ditorch
  refuses, and derived names the plugin cannot serve, e.g. memory statistics where its allocator keeps none);
- ``wrong``: the answer failed its check (a value inconsistent with the device: ``memory_allocated()`` not growing
  by a new tensor's bytes, ``manual_seed`` not making draws reproducible, ...), or the call raised anything but
  ``NotSupportedOnDevice`` (detail: the error's type and first line). A plugin function that answers wrongly is
  ``wrong``, never ``native``: the check looks at the answer, not at who gave it.

A check is a small function of the object under test: it calls it, raises :class:`Wrong` with a short reason where
the answer is inconsistent with the device, and returns a short detail. Names without a check of their own are
called (with :data:`SAMPLE_ARGS` where they need arguments) and must return without error; ``unsupported`` names
must raise ``NotSupportedOnDevice``; types and constants of kind ``kept`` (legacy tensor types, exceptions,
constants) have nothing to call and are listed with result ``derived``. Every check runs isolated: errors are
caught per row, and the current device, stream and random states are restored after it.

Exit status: 0 when no row is ``wrong``, 1 otherwise, 2 when there is no mapped device to probe.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ditorch.mocking.cuda_surface import NotSupportedOnDevice
from ditorch.probe_checks import NBYTES, Wrong, close, device_type, expect, on_device

__all__ = ["RESULTS", "Row", "Wrong", "probe", "run"]

RESULTS = ("native", "derived", "unsupported", "wrong")
DEFAULT_JSON = "ditorch_probe.json"


@dataclass
class Row:
    name: str
    kind: str
    result: str
    detail: str
    seconds: float


def first_line(exc: BaseException, limit: int = 160) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else "")[:limit]


def short(value: Any, limit: int = 50) -> str:
    """A value in a few characters: its repr, or its type where the repr is an address."""
    text = repr(value)
    if " at 0x" in text:
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def count() -> int:
    return torch.accelerator.device_count()


def draw() -> torch.Tensor:
    return torch.randn(8, device="cuda").cpu()


# -- devices ---------------------------------------------------------------------------------------------------------

def _lands_on(index: int) -> torch.device | None:
    """Where a tensor made on ``cuda:<index>`` lands (None: the plugin refused)."""
    try:
        return torch.empty(1, device=f"cuda:{index}").device
    except Exception:  # noqa: BLE001  (no such device: the answer this looks for)
        return None


def check_is_available(fn: Callable[[], Any]) -> str:
    got = fn()
    expect(got is True, f"{got!r} with an active device")
    return "True"


def check_device_count(fn: Callable[[], Any]) -> str:
    n = fn()
    expect(isinstance(n, int) and n > 0, f"{n!r}, not a positive int")
    expect(n == count(), f"{n}, torch.accelerator.device_count() is {count()}")
    landed = [_lands_on(i) for i in range(n + 1)]
    usable = [i for i, d in enumerate(landed) if d == torch.device(device_type(), i)]
    expect(usable == list(range(n)), f"{n}, but tensors can be made on cuda:i for i in {usable}")
    beyond = f"; cuda:{n} gives {landed[n]}, not an error" if landed[n] is not None else ""
    return f"{n} device(s){beyond}"


def check_current_device(fn: Callable[[], Any]) -> str:
    for i in range(count()):
        torch.cuda.set_device(i)
        expect(fn() == i, f"{fn()!r} after set_device({i})")
    return f"follows set_device on {count()} device(s)"


def check_set_device(fn: Callable[[int], Any]) -> str:
    for i in range(count()):
        fn(i)
        t = torch.empty(1, device="cuda")
        expect(on_device(t, i), f'after set_device({i}) a "cuda" tensor lands on {t.device}')
        expect(torch.accelerator.current_device_index() == i, f"torch.accelerator's device is not {i}")
    return f"'cuda' follows it on {count()} device(s)"


def check_device_class(cls: Any) -> str:
    for i in range(count()):
        before = torch.accelerator.current_device_index()
        with cls(i):
            t = torch.empty(1, device="cuda")
            expect(on_device(t, i), f'inside device({i}) a "cuda" tensor lands on {t.device}')
        expect(torch.accelerator.current_device_index() == before, "the current device is not restored on exit")
    return "selects and restores"


def check_device_of(fn: Callable[[Any], Any]) -> str:
    last = count() - 1
    x = torch.empty(1, device=f"cuda:{last}")
    with fn(x):
        expect(torch.accelerator.current_device_index() == last, f"device_of(a cuda:{last} tensor) does not select it")
    return f"selects cuda:{last}"


def check_get_device_name(fn: Callable[[int], Any]) -> str:
    names = [fn(i) for i in range(count())]
    expect(all(isinstance(n, str) and n for n in names), f"{names!r}: not non-empty strings")
    return names[0]


def check_get_device_capability(fn: Callable[[int], Any]) -> str:
    for i in range(count()):
        cap = fn(i)
        expect(isinstance(cap, tuple) and len(cap) == 2 and all(isinstance(v, int) for v in cap),
               f"{cap!r}: not a pair of ints")
    return str(fn(0))


def check_get_device_properties(fn: Callable[[int], Any]) -> str:
    for i in range(count()):
        p = fn(i)
        expect(isinstance(p.name, str) and p.name, f"name {p.name!r}")
        expect(isinstance(p.major, int) and isinstance(p.minor, int), f"major/minor {p.major!r}/{p.minor!r}")
        try:
            memory = p.total_memory
        except NotSupportedOnDevice:  # a field the plugin does not know refuses; the others answer
            memory = None
        expect(memory is None or isinstance(memory, int) and memory > 0, f"total_memory {memory!r}")
    known = "total_memory not known" if memory is None else f"{memory / 2**30:.1f} GiB"
    return f"{p.name}, {p.major}.{p.minor}, {known}"


def check_is_bf16_supported(fn: Callable[[], Any]) -> str:
    got = fn()
    expect(isinstance(got, bool), f"{got!r}: not a bool")
    if not got:
        return "False"
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=g).bfloat16() for _ in range(2))
    on = (a.cuda() @ b.cuda()).cpu()
    expect(on.dtype == torch.bfloat16, f"True, but a bf16 matmul on the device gives {on.dtype}")
    close(on, a @ b, "True, but a bf16 matmul", rtol=1.6e-2, atol=1e-2)
    return "True; a bf16 matmul matches the CPU's"


# -- synchronization, streams, events --------------------------------------------------------------------------------

def _matmul_on(stream: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(32, 32)
    xd = x.cuda()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.StreamContext(stream):
        y = xd @ xd
    return y, x @ x


def check_synchronize(fn: Callable[[], Any]) -> str:
    x = torch.randn(64, 64, device="cuda")
    event = torch.Event(device=x.device)
    x = x @ x
    event.record()
    fn()
    expect(event.query(), "an event recorded before synchronize() is still pending")
    return "leaves a recorded event complete"


def check_stream_class(cls: Any) -> str:
    s = cls()
    expect(s.device.type == device_type(), f"{s!r} is not a stream of the device")
    y, ref = _matmul_on(s)
    s.synchronize()
    expect(s.query(), "work on the stream is pending after its synchronize()")
    close(y, ref, "a matmul on a side stream", atol=1e-5)
    return "work on a side stream equals the CPU's"


def check_current_stream(fn: Callable[[], Any]) -> str:
    s = fn()
    expect(s.device == torch.device(device_type(), torch.accelerator.current_device_index()),
           f"{s!r} is not a stream of the current device")
    return str(s.device)


def check_set_stream(fn: Callable[[Any], Any]) -> str:
    s = torch.cuda.Stream()
    fn(s)
    expect(torch.cuda.current_stream() == s, "current_stream() is not the stream set")
    return "makes the stream current"


def check_stream_context(fn: Callable[[Any], Any]) -> str:
    s, before = torch.cuda.Stream(), torch.cuda.current_stream()
    with fn(s):
        expect(torch.cuda.current_stream() == s, "the stream is not current inside the block")
    expect(torch.cuda.current_stream() == before, "the previous stream is not restored after the block")
    return "current inside, restored after"


def check_event_class(cls: Any) -> str:
    """Three timing events around work: no time is negative, and the two parts add up to the whole (event times
    are timestamps; how long the work takes is not judged: it varies from run to run)."""
    x = torch.randn(64, 64, device="cuda")
    start, middle, end = (cls(enable_timing=True) for _ in range(3))
    start.record()
    for _ in range(10):
        x @ x
    middle.record()
    for _ in range(10):
        x @ x
    end.record()
    end.synchronize()
    expect(end.query(), "an event is pending after its synchronize()")
    first, second, whole = start.elapsed_time(middle), middle.elapsed_time(end), start.elapsed_time(end)
    expect(min(first, second, whole) >= 0, f"elapsed_time negative ({first:.3g}, {second:.3g}, {whole:.3g} ms)")
    expect(abs(first + second - whole) <= 1e-3 * whole + 1e-2,
           f"elapsed_time parts {first:.3g} + {second:.3g} ms do not add up to the whole, {whole:.3g} ms")
    return f"elapsed_time {first:.3g} + {second:.3g} = {whole:.3g} ms for 20 matmuls"


# -- memory ----------------------------------------------------------------------------------------------------------

def _around_tensor(fn: Callable[[], Any]) -> tuple[int, int, int]:
    """``fn()`` before a tensor of NBYTES is allocated on the device, while it lives, after it is freed."""
    before = fn()
    x = torch.empty(NBYTES // 4, device="cuda")
    during = fn()
    del x
    return before, during, fn()


def check_memory_allocated(fn: Callable[[], Any]) -> str:
    before, during, after = _around_tensor(fn)
    expect(during - before >= NBYTES, f"grew by {during - before} B for a {NBYTES} B tensor")
    expect(during - after >= NBYTES, f"shrank by {during - after} B when a {NBYTES} B tensor was freed")
    return f"+{during - before} B, -{during - after} B for a {NBYTES} B tensor"


def check_at_least_a_tensor(fn: Callable[[], Any]) -> str:
    """A peak or reserved figure: at least the bytes of a live tensor, and no lower than before it was made."""
    before, during, _ = _around_tensor(fn)
    expect(isinstance(during, int) and during >= max(before, NBYTES),
           f"{during!r} B with a {NBYTES} B tensor alive ({before} B before it)")
    return f"{during} B with a {NBYTES} B tensor alive"


def check_reset_peak(fn: Callable[[], Any]) -> str:
    fn()
    x = torch.empty(NBYTES // 4, device="cuda")
    del x
    peak = torch.cuda.max_memory_allocated()
    fn()
    dropped = peak - torch.cuda.max_memory_allocated()
    expect(dropped >= NBYTES, f"max_memory_allocated() dropped by {dropped} B, not by a freed {NBYTES} B tensor")
    return f"the peak drops by {dropped} B"


def check_mem_get_info(fn: Callable[[], Any]) -> str:
    free, total = fn()
    expect(isinstance(free, int) and isinstance(total, int), f"({free!r}, {total!r}): not ints")
    expect(0 <= free <= total and total > 0, f"free {free} B, total {total} B")
    return f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free"


def check_memory_stats(fn: Callable[[], Any]) -> str:
    key = "allocated_bytes.all.current"
    before, during, _ = _around_tensor(lambda: fn()[key])
    x = torch.empty(NBYTES // 4, device="cuda")
    stats, allocated = fn(), torch.cuda.memory_allocated()
    del x
    expect(during - before >= NBYTES, f"{key} grew by {during - before} B for a {NBYTES} B tensor")
    expect(stats[key] == allocated, f"{key} {stats[key]} != memory_allocated() {allocated}")
    return f"{len(stats)} keys, {key} = memory_allocated()"


def check_memory_stats_nested(fn: Callable[[], Any]) -> str:
    x = torch.empty(NBYTES // 4, device="cuda")
    current, allocated = fn()["allocated_bytes"]["all"]["current"], torch.cuda.memory_allocated()
    del x
    expect(current == allocated >= NBYTES, f"allocated_bytes.all.current {current} != memory_allocated() {allocated}")
    return "allocated_bytes.all.current = memory_allocated()"


def check_caching_allocator(_: Any) -> str:
    pointer = torch.cuda.caching_allocator_alloc(512)
    expect(isinstance(pointer, int) and pointer, f"caching_allocator_alloc(512) gave {pointer!r}")
    torch.cuda.caching_allocator_delete(pointer)
    return "alloc(512) and delete"


# -- random numbers --------------------------------------------------------------------------------------------------

def check_manual_seed(fn: Callable[[int], Any]) -> str:
    fn(1234)
    a = draw()
    fn(1234)
    b = draw()
    expect(torch.equal(a, b), "the same seed gave different draws")
    fn(4321)
    expect(not torch.equal(draw(), a), "another seed gave the same draws")
    return "same seed, same draws"


def check_initial_seed(fn: Callable[[], Any]) -> str:
    torch.cuda.manual_seed(1234)
    got = fn()
    expect(got == 1234, f"{got!r} after manual_seed(1234)")
    return "the seed set"


def check_seed(fn: Callable[[], Any]) -> str:
    before = torch.cuda.initial_seed()
    fn()
    expect(torch.cuda.initial_seed() != before, "initial_seed() did not change")
    return "a new initial_seed"


def _round_trip(get: Callable[[], Any], put: Callable[[Any], Any], state_of: Callable[[Any], Any] | None) -> str:
    """set(get()) repeats the draws; with ``state_of`` (checking ``get``) the state also moves with a draw."""
    state = get()
    a = draw()
    after = get()
    put(state)
    expect(torch.equal(draw(), a), "set_rng_state(get_rng_state()) did not repeat the draws")
    if state_of is not None:
        expect(not torch.equal(state_of(after), state_of(state)), "the state did not change with a draw")
    return "set(get()) repeats the draws"


def check_get_rng_state_all(fn: Callable[[], Any]) -> str:
    expect(len(fn()) == count(), f"{len(fn())} states for {count()} device(s)")
    current = torch.accelerator.current_device_index()
    return _round_trip(fn, torch.cuda.set_rng_state_all, lambda s: s[current])


def check_default_generators(generators: Any) -> str:
    expect(len(generators) == count(), f"{len(generators)} generators for {count()} device(s)")
    devices = {g.device.type for g in generators}
    expect(devices == {device_type()}, f"generators of {sorted(devices)}")
    return f"{len(generators)} generator(s)"


# -- the rest --------------------------------------------------------------------------------------------------------

def returns(kind: type | tuple[type, ...], value: Any = None) -> Callable[[Callable[[], Any]], str]:
    """A check: the zero-argument call answers an instance of ``kind`` (and ``value`` when given)."""

    def check(fn: Callable[[], Any]) -> str:
        got = fn()
        expect(isinstance(got, kind) and (value is None or got == value), f"{got!r}")
        return short(got)

    return check


def check_init(fn: Callable[[], Any]) -> str:
    fn()
    expect(torch.cuda.is_initialized(), "is_initialized() is False after init()")
    return "is_initialized() after it"


def check_nvtx(_: Any) -> str:
    depth = torch.cuda.nvtx.range_push("probe")
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_end(torch.cuda.nvtx.range_start("probe"))
    torch.cuda.nvtx.mark("probe")
    with torch.cuda.nvtx.range("probe"):
        pass
    return f"push/pop (depth {depth}), start/end, mark, range"


def check_autocast(cls: Any) -> str:
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    a = torch.randn(8, 8, device="cuda")
    with cls(dtype=dtype):
        got = (a @ a).dtype
    expect(got == dtype, f"a matmul under it gives {got}, not {dtype}")
    return f"matmul in {dtype}"


def check_grad_scaler(cls: Any) -> str:
    scaled = cls().scale(torch.ones(2, device="cuda"))
    expect(on_device(scaled) and scaled.cpu().tolist() == [65536.0] * 2, f"scale(ones) gave {scaled}")
    return "scale() on the device"


def check_memory_summary(fn: Callable[[], Any]) -> str:
    text = fn()
    expect(isinstance(text, str) and text, f"{text!r}")
    return f"{len(text.splitlines())} lines"


CHECKS: dict[str, Callable[[Any], str]] = {
    "is_available": check_is_available, "device_count": check_device_count, "current_device": check_current_device,
    "set_device": check_set_device, "device": check_device_class, "device_of": check_device_of,
    "get_device_name": check_get_device_name, "get_device_capability": check_get_device_capability,
    "get_device_properties": check_get_device_properties, "is_bf16_supported": check_is_bf16_supported,
    "synchronize": check_synchronize, "Stream": check_stream_class, "current_stream": check_current_stream,
    "default_stream": check_current_stream, "set_stream": check_set_stream, "stream": check_stream_context,
    "StreamContext": check_stream_context, "Event": check_event_class,
    "memory_allocated": check_memory_allocated,
    **dict.fromkeys(("max_memory_allocated", "memory_reserved", "memory_cached", "max_memory_reserved",
                     "max_memory_cached"), check_at_least_a_tensor),
    **dict.fromkeys(("reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached"),
                    check_reset_peak),
    "mem_get_info": check_mem_get_info, "memory_stats": check_memory_stats,
    "memory_stats_as_nested_dict": check_memory_stats_nested, "memory_summary": check_memory_summary,
    "caching_allocator_alloc": check_caching_allocator, "caching_allocator_delete": check_caching_allocator,
    "manual_seed": check_manual_seed, "manual_seed_all": check_manual_seed, "initial_seed": check_initial_seed,
    "seed": check_seed, "seed_all": check_seed, "get_rng_state_all": check_get_rng_state_all,
    "get_rng_state": lambda fn: _round_trip(fn, torch.cuda.set_rng_state, lambda s: s),
    "set_rng_state": lambda fn: _round_trip(torch.cuda.get_rng_state, fn, None),
    "set_rng_state_all": lambda fn: _round_trip(torch.cuda.get_rng_state_all, fn, None),
    "default_generators": check_default_generators,
    "init": check_init, "is_initialized": returns(bool, True), "is_current_stream_capturing": returns(bool, False),
    "amp_definitely_not_available": returns(bool, False), "get_arch_list": returns(list),
    "get_gencode_flags": returns(str), "get_allocator_backend": returns(str), "is_tf32_supported": returns(bool),
    "get_per_process_memory_fraction": returns(float), "get_sync_debug_mode": returns(int),
    "device_memory_used": returns(int), "list_gpu_processes": returns(str), "memory_snapshot": returns(list),
    "is_enabled": returns(bool), "tuning_is_enabled": returns(bool), "record_untuned_is_enabled": returns(bool),
    **dict.fromkeys(("range_push", "range_pop", "range_start", "range_end", "mark", "range"), check_nvtx),
    "autocast": check_autocast, "GradScaler": check_grad_scaler,
}

#: Arguments for the names without a check of their own that cannot be called without any.
SAMPLE_ARGS: dict[str, tuple[Any, ...]] = {
    "can_device_access_peer": (0, 0), "set_sync_debug_mode": (0,), "custom_bwd": (lambda ctx, grad: grad,),
}


def call(fn: Callable[..., Any], name: str) -> Any:
    """``fn`` with its sample arguments; a context manager it returns is entered and left."""
    result = fn(*SAMPLE_ARGS.get(name, ()))
    if isinstance(result, contextlib.AbstractContextManager):
        with result:
            pass
    return result


def check_for(name: str, kind: str, obj: Any) -> Callable[[Any], str]:
    """The check of one surface name (see the module docstring)."""
    if kind == "unsupported":
        def refuses(fn: Any) -> str:
            got = call(fn, name)
            raise Wrong(f"returned {short(got)}, expected NotSupportedOnDevice")

        return refuses
    if name in CHECKS:
        return CHECKS[name]
    if isinstance(obj, type) and kind == "kept":
        return lambda cls: "exception class" if issubclass(cls, BaseException) else "type (nothing to call)"
    if not callable(obj):
        return lambda value: f"constant {short(value)}"
    return lambda fn: f"returns {short(call(fn, name))}"


# -- running ---------------------------------------------------------------------------------------------------------

def _save(module: ModuleType) -> dict[str, Any]:
    saved: dict[str, Any] = {"cpu_rng": torch.get_rng_state()}
    with contextlib.suppress(Exception):
        saved["device"] = _own(module, "current_device", torch.accelerator.current_device_index)()
        saved["stream"] = _own(module, "current_stream", torch.accelerator.current_stream)(saved["device"])
    with contextlib.suppress(Exception):
        saved["rng"] = [module.get_rng_state(i) for i in range(count())]
    return saved


def _own(module: ModuleType, name: str, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The vendor module's own function (what the probe restores with), else ``torch.accelerator``'s."""
    fn = getattr(module, name, None)
    return fn if callable(fn) else fallback


def _restore(module: ModuleType, saved: dict[str, Any]) -> None:
    torch.set_rng_state(saved["cpu_rng"])
    steps: list[Callable[[], Any]] = []
    for i, state in enumerate(saved.get("rng", ())):
        steps.append(lambda i=i, state=state: module.set_rng_state(state, i))
    if "stream" in saved:
        steps.append(lambda: _own(module, "set_stream", torch.accelerator.set_stream)(saved["stream"]))
    if "device" in saved:
        steps.append(lambda: _own(module, "set_device", torch.accelerator.set_device_index)(saved["device"]))
    for step in steps:
        with contextlib.suppress(Exception):
            step()


@contextlib.contextmanager
def isolated(module: ModuleType) -> Iterator[None]:
    """Warnings silenced; current device, stream and random states restored afterwards."""
    saved = _save(module)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _restore(module, saved)


def _refusal(exc: NotSupportedOnDevice) -> str:
    text = first_line(exc, 300)
    match = re.match(r"torch\.cuda\.\S+ is not supported on \S+ \((.*)\)$", text)
    return (match.group(1) if match else text)[:160]


def run_check(name: str, kind: str, check: Callable[[Any], str], obj: Any, module: ModuleType,
              passed: str) -> Row:
    """Run one check isolated; ``passed`` is the result when it passes (``native`` or ``derived``)."""
    start = time.perf_counter()
    try:
        with isolated(module):
            detail, result = check(obj), passed
    except NotSupportedOnDevice as exc:
        detail, result = _refusal(exc), "unsupported"
    except Wrong as exc:
        detail, result = first_line(exc), "wrong"
    except Exception as exc:  # noqa: BLE001  (the plugin crashed on a name ditorch maps: that is wrong too)
        detail, result = f"{type(exc).__name__}: {first_line(exc)}", "wrong"
    return Row(name, kind, result, str(detail), round(time.perf_counter() - start, 4))


def probe(adapter: Any) -> list[Row]:
    """Every surface name's row, then every idiom's."""
    from ditorch import probe_idioms
    from ditorch.mocking import cuda_surface
    from ditorch.mocking.cuda_generic import RNG_NAMES
    from op_tools.device_random import draws_from_cpu

    module = adapter.device_module()
    entries = cuda_surface.entries(module)
    # a plugin whose random kernels draw from the CPU's generator: ditorch's seeding follows them (cuda_generic)
    rerouted = set(RNG_NAMES) if draws_from_cpu(adapter.device_type, 0, module) else set()
    kinds = {e.name: "generic" if e.name in rerouted and e.kind == "vendor" else e.kind for e in entries}
    rows = []
    for e in entries:
        parent = getattr(torch.cuda, e.module) if e.module else torch.cuda
        obj = getattr(parent, e.name)
        kind = kinds[e.name]
        passed = "native" if kind == "vendor" else "derived"
        rows.append(run_check(e.qualname, kind, check_for(e.name, kind, obj), obj, module, passed))
    for idiom in probe_idioms.IDIOMS:
        native = all(kinds.get(name) == "vendor" for name in idiom.uses) and not (
            idiom.compiles and not adapter.is_native)
        rows.append(run_check(f"idiom: {idiom.name}", "idiom", lambda _, c=idiom.check: c(), None, module,
                              "native" if native else "derived"))
    return rows


def table(rows: list[Row], width: int = 90) -> list[str]:
    """The rows as aligned plain-text columns, names first, then idioms."""
    w_name = max(len(r.name) for r in rows)
    w_kind = max(len("kind"), *(len(r.kind) for r in rows))

    def line(name: str, kind: str, result: str, detail: str) -> str:
        return f"{name:<{w_name}}  {kind:<{w_kind}}  {result:<11}  {detail}".rstrip()

    out = [line("name", "kind", "result", "detail")]
    names = [r for r in rows if r.kind != "idiom"]
    for title, group in (("torch.cuda names", names), ("idioms", [r for r in rows if r.kind == "idiom"])):
        out.append(f"-- {title} ({len(group)}) --")
        for r in group:
            detail = r.detail if len(r.detail) <= width else r.detail[:width - 3] + "..."
            out.append(line(r.name, r.kind, r.result, detail))
    return out


def summary(rows: list[Row]) -> dict[str, int]:
    counts = Counter(r.result for r in rows)
    return {result: counts.get(result, 0) for result in RESULTS}


def write_json(path: Path, adapter: Any, rows: list[Row]) -> None:
    from diopi.case_format import atomic_open

    data = {
        "device": adapter.device_type, "framework": f"{adapter.framework} {adapter.version()}",
        "adapter": adapter.describe(), "torch": torch.__version__, "device_count": count(),
        "rows": [asdict(r) for r in rows], "summary": summary(rows),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def run(json_path: str | os.PathLike[str] | None = None) -> int:
    """``ditorch info --probe``: print the table and the summary, write the JSON copy; the exit status."""
    import ditorch

    adapter = ditorch.adapter
    if adapter is None:
        print("ditorch info: error: --probe: no accelerator to probe (ditorch runs on the CPU)", file=sys.stderr)
        return 2
    if adapter.is_native and adapter.device_type == "cuda":
        print("ditorch info: error: --probe: torch.cuda is PyTorch's own here (native CUDA): nothing is mapped to "
              "probe", file=sys.stderr)
        return 2
    if not ditorch.mocked:
        print(f"ditorch info: error: --probe: the cuda mapping is off (DITORCH_DISABLE_MOCK=1): torch.cuda is not "
              f"mapped to {adapter.device_type}, nothing to probe", file=sys.stderr)
        return 2
    print(f"probing {adapter.framework} {adapter.version()} ({adapter.describe()}): device {adapter.device_type} "
          f"x{count()}, torch {torch.__version__}", flush=True)
    rows = probe(adapter)
    print("\n".join(table(rows)))
    for r in rows:
        if r.result == "wrong":
            print(f"wrong: {r.name}: {r.detail}")
    path = Path(json_path or DEFAULT_JSON).absolute()
    write_json(path, adapter, rows)
    counts = summary(rows)
    print("probe: " + ", ".join(f"{counts[r]} {r}" for r in RESULTS))
    print(f"json: {path}")
    return 1 if counts["wrong"] else 0
