"""``torch.dipu``: the device module, with the same function names as ``torch.cuda``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from torch_dipu import host_sync
from torch_dipu.host_sync import get_sync_debug_mode, set_sync_debug_mode, synchronize_count, synchronize_counts
from torch_dipu.state import get_state
from torch_dipu.streams import Event, Stream, _index, current_stream, default_stream, set_stream, stream

__all__ = [
    "Event", "Stream", "caching_allocator_alloc", "caching_allocator_delete", "current_device", "current_stream",
    "default_stream", "device", "device_count",
    "default_generators", "empty_cache", "get_amp_supported_dtype", "get_device_name", "get_device_properties",
    "get_rng_state", "get_rng_state_all", "initial_seed", "is_available", "is_bf16_supported", "is_initialized",
    "manual_seed", "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "mem_get_info",
    "memory_allocated", "memory_reserved", "memory_snapshot", "memory_stats", "reset_peak_memory_stats", "seed",
    "seed_all",
    "set_device", "set_rng_state", "set_rng_state_all", "set_stream", "stream", "synchronize",
    "get_sync_debug_mode", "set_sync_debug_mode", "synchronize_count", "synchronize_counts",
]


def is_available() -> bool:
    return get_state().device_count() > 0


#: Read by ``torch.utils.checkpoint`` before it stashes the device RNG state for recomputation.
_initialized = True


def is_initialized() -> bool:
    return True


#: One generator per device, used by random operators called without ``generator=`` (as
#: ``torch.cuda.default_generators``); filled when torch_dipu is imported.
default_generators: tuple[torch.Generator, ...] = ()


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    """Nothing to do: the runtime is initialized on import (kept for torch.cuda compatibility)."""


def device_count() -> int:
    """Visible dipu devices (``DIPU_VISIBLE_DEVICES`` selects and orders the vendor's)."""
    return get_state().device_count()


def current_device() -> int:
    return get_state().current_device


def set_device(device: torch.device | str | int) -> None:
    get_state().current_device = _index(device)


@contextlib.contextmanager
def device(device: torch.device | str | int | None) -> Iterator[None]:
    """Context manager that changes the current dipu device."""
    state = get_state()
    previous = state.current_device
    if device is not None and not (isinstance(device, int) and device < 0):
        set_device(device)
    try:
        yield
    finally:
        state.current_device = previous


def synchronize(device: torch.device | str | int | None = None) -> None:
    """Wait until all work on ``device`` has finished (a counted host synchronisation, see torch_dipu.host_sync)."""
    state = get_state()
    index = _index(device)
    host_sync.record("synchronize", index, "torch.dipu.synchronize")
    state.runtime.synchronize(state.vendor_index(index))


def get_device_name(device: torch.device | str | int | None = None) -> str:
    return str(get_device_properties(device).name)


def get_device_properties(device: torch.device | str | int | None = None) -> Any:
    state = get_state()
    return SimpleNamespace(**state.runtime.properties(state.vendor_index(_index(device))))


def get_amp_supported_dtype() -> list[torch.dtype]:
    runtime = get_state().runtime
    return [d for d in (torch.float16, torch.bfloat16) if runtime.supports_dtype(d)]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return get_state().runtime.supports_dtype(torch.bfloat16)


# -- memory -------------------------------------------------------------------------------------------

def memory_allocated(device: torch.device | str | int | None = None) -> int:
    """Bytes of the allocator blocks held by live dipu tensors on ``device`` (sizes rounded as CUDA's)."""
    return get_state().memory.allocated(_index(device))


def max_memory_allocated(device: torch.device | str | int | None = None) -> int:
    return get_state().memory.peak(_index(device))


def memory_reserved(device: torch.device | str | int | None = None) -> int:
    """Bytes the caching allocator holds from the vendor on ``device`` (allocated blocks and its cache)."""
    return get_state().memory.reserved(_index(device))


def max_memory_reserved(device: torch.device | str | int | None = None) -> int:
    return get_state().memory.peak_reserved(_index(device))


def reset_peak_memory_stats(device: torch.device | str | int | None = None) -> None:
    get_state().memory.reset_peak(_index(device))


def reset_max_memory_allocated(device: torch.device | str | int | None = None) -> None:
    reset_peak_memory_stats(device)


def memory_stats(device: torch.device | str | int | None = None) -> dict[str, int]:
    return get_state().memory.stats(_index(device))


def mem_get_info(device: torch.device | str | int | None = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``: free is the capacity less what the allocator has reserved."""
    return get_state().memory.mem_get_info(_index(device))


def empty_cache() -> None:
    """Return every cached free block to the vendor: afterwards ``memory_reserved() == memory_allocated()``."""
    get_state().memory.empty_cache()


def memory_snapshot() -> list[dict[str, Any]]:
    """Every segment of every device with its blocks, in ``torch.cuda.memory_snapshot()``'s layout: ``device``,
    ``address``, ``total_size``, ``allocated_size``, ``segment_type`` and ``blocks`` (``address``, ``size``,
    ``requested_size``, ``state``: ``active_allocated`` or ``inactive``)."""
    return get_state().memory.snapshot()


def caching_allocator_alloc(size: int, device: torch.device | str | int | None = None, stream: Any = None) -> int:
    """Allocate ``size`` bytes from the caching allocator with no tensor; returns the block's device address."""
    return get_state().memory.caching_allocator_alloc(_index(device), int(size))


def caching_allocator_delete(mem_ptr: int) -> None:
    """Free a block of :func:`caching_allocator_alloc`; an unknown or already freed address raises RuntimeError."""
    get_state().memory.caching_allocator_delete(int(mem_ptr))


# -- random numbers -----------------------------------------------------------------------------------

def _generator(device: torch.device | str | int | None) -> torch.Generator:
    return get_state().generators[_index(device)]


def manual_seed(seed: int) -> None:
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in get_state().generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    _generator(None).seed()


def seed_all() -> None:
    for generator in get_state().generators:
        generator.seed()


def initial_seed() -> int:
    return _generator(None).initial_seed()


def get_rng_state(device: torch.device | str | int | None = "dipu") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: torch.device | str | int | None = "dipu") -> None:
    _generator(device).set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in get_state().generators]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for generator, new_state in zip(get_state().generators, new_states, strict=False):
        generator.set_state(new_state.cpu())
