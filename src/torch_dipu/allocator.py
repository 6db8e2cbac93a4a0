"""The dipu caching allocator: device address space and memory accounting, as CUDA's caching allocator.

The vendor provides raw device memory (``DeviceRuntime.raw_malloc`` / ``raw_free``); this module caches it.
Every storage that backs a dipu tensor gets a *block*: a range of device addresses cut from a *segment* the
vendor allocated. When the storage dies (a weak reference), its block goes back to the cache (``BF``, ``BS``)
or to the vendor (``RAW``), chosen by ``DIPU_DEVICE_MEMCACHING_ALGORITHM``:

* ``BF`` (default), best fit as CUDA: sizes rounded up to 512 bytes; requests up to 1 MiB come from 2 MiB
  segments, larger ones below 10 MiB from 20 MiB segments, others from a segment of their size rounded up to
  2 MiB; the smallest free block that fits is split. A freed block is held for the next request of its size and
  merges with its free neighbours when a request finds no free block (before any new segment), on
  ``empty_cache`` and for a snapshot.
* ``BS``, size bins: sizes rounded up to a power of two (at least 512 bytes), one block per segment, no splitting.
* ``RAW``: every block is its own vendor allocation, freed at once (reserved == allocated).

The bytes of a tensor stay in the vendor's storage tensor (``DipuTensor._raw``) that the kernel made: carving
storages out of segment buffers would give unrelated tensors one storage (breaking storage identity, e.g.
safetensors' shared-tensor checks) and let a stale view read a reused block. The allocator decides *whether* and
*where* memory is available, so ``memory_reserved``, ``empty_cache``, out-of-memory errors and snapshots behave
as on CUDA, and the vendor sees the malloc/free traffic of a caching allocator.

A storage's death only queues its block (``_storage_died``); the next allocator call or figure frees the queue
under the lock, so no figure shows the delay and no callback ever runs inside the allocator's own code.
"""

from __future__ import annotations

import bisect
import collections
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from torch_dipu.memory import format_bytes

ROUND = 512  #: every block size is a multiple of this
SMALL_SIZE = 1 << 20  #: largest request served from the small pool
SMALL_BUFFER = 2 << 20  #: segment size of the small pool
LARGE_BUFFER = 20 << 20  #: segment size of large requests below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20  #: larger requests get a segment of their size rounded up to this
ALGORITHMS = ("BF", "BS", "RAW")
_ADDRESS = (1 << 64) - 1  #: the address bits of a free pool's key (``size << 64 | address``)


class Block:
    """A range of device memory: allocated to a storage (or ``caching_allocator_alloc``) or free in the cache."""

    __slots__ = ("address", "allocated", "device", "held", "next", "prev", "requested", "segment", "size")

    def __init__(self, device: int, address: int, size: int, segment: Segment) -> None:
        self.device, self.address, self.size, self.segment = device, address, size, segment
        self.requested = 0
        self.allocated = False
        # Freed but held unmerged in its size's list (BF, CachingAllocator._reclaim): it keeps ``allocated`` set,
        # so that merging and the segment code leave it alone until CachingAllocator._merge_held.
        self.held = False
        self.prev: Block | None = None
        self.next: Block | None = None


class _StorageRef(weakref.ref):
    """The weak reference by which a storage's death frees its block (slots: no closure per storage)."""

    __slots__ = ("block", "key")


class Segment:
    """One ``raw_malloc``'d range, cut into consecutive blocks (``first``, linked by ``next``)."""

    __slots__ = ("address", "device", "first", "size", "small")

    def __init__(self, device: int, address: int, size: int, small: bool) -> None:
        self.device, self.address, self.size, self.small = device, address, size, small
        self.first = Block(device, address, size, self)

    def blocks(self) -> Iterator[Block]:
        block: Block | None = self.first
        while block is not None:
            yield block
            block = block.next


class Stat:
    """One statistic as CUDA keeps it: current value, peak, and the totals added and removed."""

    __slots__ = ("current", "freed", "peak")

    def __init__(self) -> None:
        self.current = self.peak = self.freed = 0

    @property
    def allocated(self) -> int:
        """The total ever added (what is there now plus what went)."""
        return self.current + self.freed

    def add(self, n: int) -> None:
        self.current += n
        if self.current > self.peak:
            self.peak = self.current

    def sub(self, n: int) -> None:
        self.current -= n
        self.freed += n


class DeviceMemory:
    """The cache and statistics of one dipu device."""

    def __init__(self, index: int, physical: int, capacity: int) -> None:
        self.index, self.physical, self.capacity = index, physical, capacity
        self.segments: dict[int, Segment] = {}  # address -> segment
        # Free blocks (BF), sorted by size then address: each key is ``size << 64 | address`` (one int compares
        # faster than a tuple).
        self.free_small: list[int] = []
        self.free_large: list[int] = []
        self.free_blocks: dict[int, Block] = {}  # address -> free cached block (BF, BS)
        self.held: dict[int, list[Block]] = {}  # size -> freed blocks not merged yet, last freed last (BF)
        self.bins: dict[int, list[Block]] = {}  # size -> free blocks (BS)
        self.allocated_bytes, self.requested_bytes, self.reserved_bytes = Stat(), Stat(), Stat()
        self.allocation, self.segment = Stat(), Stat()
        self.num_alloc_retries = self.num_ooms = self.num_device_alloc = self.num_device_free = 0

    def stats(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, stat in (("allocated_bytes", self.allocated_bytes), ("active_bytes", self.allocated_bytes),
                           ("requested_bytes", self.requested_bytes), ("reserved_bytes", self.reserved_bytes),
                           ("allocation", self.allocation), ("active", self.allocation), ("segment", self.segment)):
            for measure in ("current", "peak", "allocated", "freed"):
                out[f"{name}.all.{measure}"] = getattr(stat, measure)
        out.update(num_alloc_retries=self.num_alloc_retries, num_ooms=self.num_ooms,
                   num_device_alloc=self.num_device_alloc, num_device_free=self.num_device_free)
        return out


def _round(nbytes: int) -> int:
    return (nbytes + ROUND - 1) // ROUND * ROUND


class CachingAllocator:
    """The device memory of every dipu device (``state.memory``): blocks for storages, segments from the vendor.

    ``track`` / ``allocate`` / ``resized`` are what dispatch and the factories call; the rest serves
    ``torch.dipu``'s memory functions and the memory checker (:attr:`observer`).
    """

    def __init__(self, runtime: Any, algorithm: str = "BF") -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown allocator algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
        self.runtime = runtime
        self.vendor: str = runtime.name
        self.algorithm = algorithm
        self.devices: list[DeviceMemory] = []
        self._live: dict[int, _StorageRef] = {}  # id(storage) -> its weak reference (``.block``: its block)
        self._died = self._storage_died  # the callback of every storage's weak reference, bound once
        self._manual: dict[int, Block] = {}  # address -> block of caching_allocator_alloc
        # Blocks whose storage died, freed (in the order they died) under the lock by the next allocator call or
        # figure, never inside the weak reference's callback: a callback may run in the middle of an allocator
        # call (a garbage collection it triggered, another thread), and one append is all it costs. Every figure
        # and every allocation frees them first, so no one can see the delay.
        self._lock = threading.Lock()
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._dead: collections.deque[Block] = collections.deque()
        #: The memory checker (torch_dipu.mem_check) when enabled: told of every block allocated and freed.
        self.observer: Any = None
        self._alloc: Callable[[DeviceMemory, int], Block] = getattr(self, f"_alloc_{algorithm.lower()}")
        self._release_block: Callable[[DeviceMemory, Block], None] | None = getattr(
            self, f"_free_{algorithm.lower()}", None)
        self._hold = algorithm == "BF"  # BF's free is _reclaim's: the block is held
        self._tracker: Any = None  # the compiled StorageTracker in use (use_compiled)

    def use_compiled(self, fastalloc: Any | None) -> None:
        """Serve ``track``, storages' deaths and ``_reclaim`` through ``fastalloc.StorageTracker``
        (torch_dipu._fastalloc: the common request, a block BF holds for the rounded size, in C; every other request
        through :meth:`malloc`), or, with None, in Python alone. Handlers bind ``track`` when built: rebuild them."""
        if fastalloc is None:
            self._tracker = None
            self.__dict__.pop("track", None)
            self._died = self._storage_died
        else:
            self._tracker = fastalloc.StorageTracker(self, Block, Stat, _StorageRef)
            self.track = self._tracker  # type: ignore[method-assign]
            self._died = self._tracker.died

    # -- devices ------------------------------------------------------------------------------------------
    def resize(self, capacity: list[int], physical: list[int] | None = None) -> None:
        """Fit the tables to ``len(capacity)`` visible devices (``physical``: their vendor indices). Tables only
        grow: a device that goes away keeps its blocks, released to its vendor device as they die."""
        physical = list(range(len(capacity))) if physical is None else physical
        for i, (cap, phys) in enumerate(zip(capacity, physical, strict=True)):
            if i < len(self.devices):
                self.devices[i].capacity = cap
                if self.devices[i].physical != phys and not self.devices[i].segments:
                    self.devices[i].physical = phys
            else:
                self.devices.append(DeviceMemory(i, phys, cap))

    @property
    def capacity(self) -> list[int]:
        return [d.capacity for d in self.devices]

    # -- the hot path: storages made by kernels and factories ---------------------------------------------
    def track(self, raw: torch.Tensor, index: int) -> None:
        """Give the storage of ``raw`` (a kernel's output on device ``index``) a block unless it has one (the
        compiled StorageTracker stands in for this method where :meth:`use_compiled` installed it)."""
        storage = raw.untyped_storage()
        key = id(storage)
        live = self._live
        if key in live:
            return
        nbytes = storage.nbytes()
        if nbytes:
            ref = _StorageRef(storage, self._died)  # _bind, inlined (hot path)
            ref.block = self.malloc(index, nbytes)
            ref.key = key
            live[key] = ref

    def allocate(self, index: int, nbytes: int, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The storage tensor ``make()`` creates, its ``nbytes`` block taken first (a request that cannot fit
        raises ``torch.OutOfMemoryError`` before any host memory is taken)."""
        block = self.malloc(index, nbytes) if nbytes else None
        try:
            raw = make()
        except BaseException:
            if block is not None:
                self.free(block)
            raise
        if block is not None:
            storage = raw.untyped_storage()
            key = id(storage)
            if key in self._live:
                self.free(block)
            else:
                self._bind(storage, key, block)
        return raw

    def resized(self, raw: torch.Tensor, index: int) -> None:
        """Move the storage of ``raw`` to a block of its new size after an in-place resize (new block first,
        then the old one freed, as a device resize copies)."""
        storage = raw.untyped_storage()
        ref = self._live.get(id(storage))
        if ref is None:
            self.track(raw, index)
            return
        nbytes = storage.nbytes()
        if nbytes == ref.block.requested:
            return
        self._move(ref, index, nbytes)

    def resize_storage(self, storage: torch.UntypedStorage, index: int, nbytes: int) -> None:
        """``storage.resize_(nbytes)`` (a vendor storage on device ``index``) with its block moved to one of the new
        size. The new block is taken first: a size that cannot fit raises ``torch.OutOfMemoryError`` and leaves the
        storage as it was."""
        key = id(storage)
        ref = self._live.get(key)
        if ref is not None:
            self._move(ref, index, nbytes, lambda: storage.resize_(nbytes))
            return
        new = self.malloc(index, nbytes) if nbytes else None
        try:
            storage.resize_(nbytes)
        except BaseException:
            if new is not None:
                self.free(new)
            raise
        if new is not None:
            self._bind(storage, key, new)

    def _move(self, ref: _StorageRef, index: int, nbytes: int, resize: Callable[[], Any] | None = None) -> None:
        """Give the storage of ``ref`` a block of ``nbytes`` (none for 0): the new block is taken, ``resize()``
        run (a failure frees the new block and keeps the old), then the old block freed."""
        new = self.malloc(index, nbytes) if nbytes else None
        if resize is not None:
            try:
                resize()
            except BaseException:
                if new is not None:
                    self.free(new)
                raise
        old = ref.block
        if new is None:
            del self._live[ref.key]
            ref.block = None
        else:
            ref.block = new
        self.free(old)

    def _bind(self, storage: torch.UntypedStorage, key: int, block: Block) -> None:
        ref = _StorageRef(storage, self._died)
        ref.block = block
        ref.key = key
        self._live[key] = ref

    def _storage_died(self, ref: _StorageRef) -> None:
        """The weak reference callback of a storage (``self._died``, bound once): its block is freed later."""
        live = self._live
        if live.get(ref.key) is ref:
            del live[ref.key]
            if self.observer is not None:  # the memory checker hears of the free where it happened
                self.observer.on_free(ref.block)
            self._dead.append(ref.block)

    def settle(self) -> None:
        """Free the blocks of storages that died since the last allocator call (done before every figure)."""
        if self._dead:
            with self._lock:
                self._reclaim()

    def _reclaim(self) -> None:
        """Free the blocks in ``_dead`` (the lock is held): statistics, then the block back to the cache (BF:
        held in its size's list) or the vendor."""
        if self._tracker is not None:
            self._tracker.reclaim()
            return
        dead = self._dead
        devices = self.devices
        hold = self._hold
        while dead:
            block = dead.popleft()
            device = devices[block.device]
            size = block.size
            stat = device.allocated_bytes
            stat.current -= size
            stat.freed += size
            stat = device.requested_bytes
            stat.current -= block.requested
            stat.freed += block.requested
            stat = device.allocation
            stat.current -= 1
            stat.freed += 1
            if hold:  # held for the next request of its size (see _alloc_bf)
                block.held = True
                held = device.held.get(size)
                if held is None:
                    device.held[size] = [block]
                else:
                    held.append(block)
            else:
                block.allocated = False
                block.requested = 0
                self._release_block(device, block)

    # -- blocks -------------------------------------------------------------------------------------------
    def malloc(self, index: int, nbytes: int) -> Block:
        """A block of at least ``nbytes`` on device ``index`` (``torch.OutOfMemoryError`` if none can be had)."""
        device = self.devices[index]
        self._acquire()  # bound once: half the cost of ``with self._lock`` on this path
        try:
            if self._dead:
                self._reclaim()
            held = device.held.get((nbytes + 511) & ~511)  # BF's held blocks of this size (_alloc_bf, inlined)
            if held:
                block = held.pop()
                block.held = False
            else:
                block = self._alloc(device, nbytes)
                block.allocated = True
            block.requested = nbytes
            stat = device.allocated_bytes
            stat.current += block.size
            if stat.current > stat.peak:
                stat.peak = stat.current
            stat = device.requested_bytes
            stat.current += nbytes
            if stat.current > stat.peak:
                stat.peak = stat.current
            stat = device.allocation
            stat.current += 1
            if stat.current > stat.peak:
                stat.peak = stat.current
            if self.observer is not None:
                self.observer.on_alloc(block)
        finally:
            self._release()
        return block

    def free(self, block: Block) -> None:
        """Return an allocated block to the cache (BF, BS) or the vendor (RAW)."""
        with self._lock:
            if not block.allocated or block.held or block in self._dead:
                raise RuntimeError(f"dipu allocator: block 0x{block.address:x} is freed twice")
            if self.observer is not None:
                self.observer.on_free(block)
            self._dead.append(block)
            self._reclaim()

    def caching_allocator_alloc(self, index: int, nbytes: int) -> int:
        """A block owned by no tensor (``torch.dipu.caching_allocator_alloc``): its address (0 for 0 bytes)."""
        if nbytes <= 0:
            return 0
        block = self.malloc(index, nbytes)
        self._manual[block.address] = block
        return block.address

    def caching_allocator_delete(self, address: int) -> None:
        """Free a block of :meth:`caching_allocator_alloc`; an unknown or already freed address raises."""
        if address == 0:
            return
        block = self._manual.pop(address, None)
        if block is None:
            known = self.observer.describe(address) if self.observer is not None else ""
            raise RuntimeError(f"caching_allocator_delete: address 0x{address:x} is not a block of "
                               f"caching_allocator_alloc (unknown address or already freed){known}")
        self.free(block)

    # -- segments from the vendor ---------------------------------------------------------------------------
    def _segment(self, device: DeviceMemory, size: int, small: bool, requested: int, fallback: int = 0) -> Segment:
        """A new segment of ``size`` bytes. On a vendor OOM the cache is released and the malloc retried once,
        then (BF, unlike CUDA, so that a small simulated capacity is usable to its last byte) a segment of
        ``fallback`` bytes, the block's size; failing that, ``torch.OutOfMemoryError``."""
        address = self._try_raw_malloc(device, size)
        if address is None:
            device.num_alloc_retries += 1
            self._empty(device)
            address = self._try_raw_malloc(device, size)
            if address is None and 0 < fallback < size:
                size = fallback
                address = self._try_raw_malloc(device, size)
            if address is None:
                device.num_ooms += 1
                raise self.out_of_memory(requested, device.index)
        segment = Segment(device.index, address, size, small)
        device.segments[address] = segment
        device.reserved_bytes.add(size)
        device.segment.add(1)
        device.num_device_alloc += 1
        return segment

    def _try_raw_malloc(self, device: DeviceMemory, size: int) -> int | None:
        try:
            return self.runtime.raw_malloc(device.physical, size)
        except torch.OutOfMemoryError:
            return None

    def _raw_free(self, device: DeviceMemory, address: int, size: int) -> None:
        self.runtime.raw_free(device.physical, address, size)
        device.reserved_bytes.sub(size)
        device.num_device_free += 1

    def _drop_segment(self, device: DeviceMemory, segment: Segment) -> None:
        del device.segments[segment.address]
        device.segment.sub(1)
        self._raw_free(device, segment.address, segment.size)

    # -- BF: best fit with splitting and merging --------------------------------------------------------------
    # A freed block is *held*, not merged (``_reclaim``): the next request of its size takes it back at once (the
    # last freed first, in ``malloc``), with no search, split or merge: most requests of a training step repeat the
    # sizes of the last. Held blocks merge with their free neighbours when a request finds no free block (before
    # any new segment), on empty_cache and for a snapshot; so reserved memory grows only when no merged free range
    # could serve the request.
    def _alloc_bf(self, device: DeviceMemory, nbytes: int) -> Block:
        size = (nbytes + 511) & ~511  # _round, inlined (hot path)
        small = size <= SMALL_SIZE
        pool = device.free_small if small else device.free_large
        pos = bisect.bisect_left(pool, size << 64)
        if pos == len(pool) and device.held:  # no free block fits: merge the held ones, look again
            self._merge_held(device)
            pos = bisect.bisect_left(pool, size << 64)
        if pos < len(pool):
            block = device.free_blocks.pop(pool.pop(pos) & _ADDRESS)
        else:
            seg_size = SMALL_BUFFER if small else LARGE_BUFFER if size < MIN_LARGE_ALLOC else \
                (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
            block = self._segment(device, seg_size, small, nbytes, size).first
        rest = block.size - size
        if rest >= (ROUND if small else SMALL_SIZE + 1):  # CUDA: split unless the remainder is too small to use
            tail = Block(device.index, block.address + size, rest, block.segment)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            block.size = size
            self._cache_bf(device, tail)
        return block

    def _cache_bf(self, device: DeviceMemory, block: Block) -> None:
        device.free_blocks[block.address] = block
        bisect.insort(device.free_small if block.segment.small else device.free_large, block.size << 64 | block.address)

    def _uncache_bf(self, device: DeviceMemory, block: Block) -> None:
        del device.free_blocks[block.address]
        pool = device.free_small if block.segment.small else device.free_large
        del pool[bisect.bisect_left(pool, block.size << 64 | block.address)]

    def _merge_held(self, device: DeviceMemory) -> None:
        """Merge every held block with its free neighbours into the best-fit pools."""
        blocks = [b for held in device.held.values() for b in held]
        device.held.clear()
        for block in sorted(blocks, key=lambda b: b.address):
            block.held = block.allocated = False
            block.requested = 0
            self._merge_bf(device, block)

    def _merge_bf(self, device: DeviceMemory, block: Block) -> None:
        after = block.next
        if after is not None and not after.allocated:
            self._uncache_bf(device, after)
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
        before = block.prev
        if before is not None and not before.allocated:
            self._uncache_bf(device, before)
            before.size += block.size
            before.next = block.next
            if block.next is not None:
                block.next.prev = before
            block = before
        self._cache_bf(device, block)

    # -- BS: power-of-two size bins, one block per segment ----------------------------------------------------
    def _alloc_bs(self, device: DeviceMemory, nbytes: int) -> Block:
        size = max(ROUND, 1 << (nbytes - 1).bit_length())
        cached = device.bins.get(size)
        if cached:
            block = cached.pop()
            del device.free_blocks[block.address]
            return block
        return self._segment(device, size, size <= SMALL_SIZE, nbytes).first

    def _free_bs(self, device: DeviceMemory, block: Block) -> None:
        device.bins.setdefault(block.size, []).append(block)
        device.free_blocks[block.address] = block

    # -- RAW: straight to the vendor ------------------------------------------------------------------------
    def _alloc_raw(self, device: DeviceMemory, nbytes: int) -> Block:
        size = _round(nbytes)
        return self._segment(device, size, size <= SMALL_SIZE, nbytes).first

    def _free_raw(self, device: DeviceMemory, block: Block) -> None:
        self._drop_segment(device, block.segment)

    # -- releasing the cache ------------------------------------------------------------------------------
    def empty_cache(self) -> None:
        """Return every cached free range to the vendor: whole free segments and the free blocks inside partly
        used ones (the rest of such a segment becomes one segment per run of allocated blocks). Afterwards
        reserved == allocated on every device."""
        with self._lock:
            self._reclaim()
            for device in self.devices:
                self._empty(device)

    def _empty(self, device: DeviceMemory) -> None:
        if device.held:
            self._merge_held(device)
        if not device.free_blocks:
            return
        device.free_blocks.clear()
        device.free_small.clear()
        device.free_large.clear()
        device.bins.clear()
        for segment in list(device.segments.values()):
            if segment.first.next is None:  # one block: the whole segment
                if not segment.first.allocated:
                    self._drop_segment(device, segment)
                continue
            self._release_holes(device, segment)

    def _release_holes(self, device: DeviceMemory, segment: Segment) -> None:
        """Free the free blocks of a partly used segment; each run of allocated blocks left becomes a segment."""
        del device.segments[segment.address]
        device.segment.sub(1)
        run: list[Block] = []
        for block in list(segment.blocks()):
            if block.allocated:
                run.append(block)
                continue
            self._raw_free(device, block.address, block.size)
            self._close_run(device, segment, run)
            run = []
        self._close_run(device, segment, run)

    def _close_run(self, device: DeviceMemory, old: Segment, run: list[Block]) -> None:
        if not run:
            return
        first, last = run[0], run[-1]
        segment = Segment.__new__(Segment)
        segment.device, segment.address, segment.small = old.device, first.address, old.small
        segment.size = last.address + last.size - first.address
        segment.first = first
        first.prev, last.next = None, None
        for block in run:
            block.segment = segment
        device.segments[segment.address] = segment
        device.segment.add(1)

    # -- figures ------------------------------------------------------------------------------------------
    def allocated(self, index: int) -> int:
        self.settle()
        return self.devices[index].allocated_bytes.current

    def reserved(self, index: int) -> int:
        self.settle()
        return self.devices[index].reserved_bytes.current

    def peak(self, index: int) -> int:
        self.settle()
        return self.devices[index].allocated_bytes.peak

    def peak_reserved(self, index: int) -> int:
        self.settle()
        return self.devices[index].reserved_bytes.peak

    def reset_peak(self, index: int) -> None:
        self.settle()
        device = self.devices[index]
        for stat in (device.allocated_bytes, device.requested_bytes, device.reserved_bytes, device.allocation,
                     device.segment):
            stat.peak = stat.current

    def stats(self, index: int) -> dict[str, int]:
        """``torch.cuda.memory_stats`` keys that apply (``.all`` pool only) with the same names."""
        self.settle()
        return self.devices[index].stats()

    def mem_get_info(self, index: int) -> tuple[int, int]:
        """(free, total): the capacity less what this process has reserved."""
        self.settle()
        device = self.devices[index]
        return max(device.capacity - device.reserved_bytes.current, 0), device.capacity

    def live_blocks(self) -> list[Block]:
        """Every allocated block, by device and address."""
        self.settle()
        return [b for d in self.devices for s in sorted(d.segments.values(), key=lambda s: s.address)
                for b in s.blocks() if b.allocated and not b.held]

    def snapshot(self) -> list[dict[str, Any]]:
        """Segments and their blocks in ``torch.cuda.memory_snapshot()``'s layout (held blocks merged first)."""
        with self._lock:
            self._reclaim()
            for device in self.devices:
                if device.held:
                    self._merge_held(device)
        out = []
        for device in self.devices:
            for segment in sorted(device.segments.values(), key=lambda s: s.address):
                blocks = [{"address": b.address, "size": b.size, "requested_size": b.requested,
                           "state": "active_allocated" if b.allocated else "inactive"} for b in segment.blocks()]
                allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
                out.append({"device": device.index, "address": segment.address, "total_size": segment.size,
                            "allocated_size": allocated, "active_size": allocated,
                            "requested_size": sum(b["requested_size"] for b in blocks), "stream": 0,
                            "segment_type": "small" if segment.small else "large", "blocks": blocks})
        return out

    def out_of_memory(self, nbytes: int, index: int) -> torch.OutOfMemoryError:
        device = self.devices[index]
        allocated, reserved = device.allocated_bytes.current, device.reserved_bytes.current
        free = max(device.capacity - reserved, 0)
        return torch.OutOfMemoryError(
            f"DIPU out of memory. Tried to allocate {format_bytes(nbytes)}. Device dipu:{index} ({self.vendor}) "
            f"has a total capacity of {format_bytes(device.capacity)} of which {format_bytes(free)} is free. "
            f"Of the allocated memory {format_bytes(allocated)} is allocated by PyTorch, and "
            f"{format_bytes(reserved - allocated)} is reserved by PyTorch but unallocated. "
            "Reduce the batch size or raise the device capacity (DROPLET_MEMORY_CAPACITY for droplet)."
        )
