"""The caching allocator (torch_dipu.allocator): BF / BS / RAW, empty_cache, OOM, snapshot, vendor traffic."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import pytest
import torch
from test_workflows import tiny_qwen, token_batches

from torch_dipu import dispatch, mem_check
from torch_dipu.allocator import CachingAllocator
from torch_dipu.runtime import DeviceRuntime
from torch_dipu.state import get_state
from torch_dipu.vendors import droplet

MiB = 1 << 20


class Vendor(DeviceRuntime):
    """A bare vendor: the base class's raw_malloc / raw_free bookkeeping, counted."""

    name = "testvendor"

    def __init__(self, capacity: int = 1 << 30) -> None:
        self.capacity = capacity
        self.calls: list[tuple[str, int, int]] = []

    def device_count(self) -> int:
        return 1

    def memory_capacity(self, index: int) -> int:
        return self.capacity

    def kernel(self, fn, op):  # noqa: ANN001, ANN201
        return None

    def raw_malloc(self, index: int, nbytes: int) -> int:
        address = super().raw_malloc(index, nbytes)
        self.calls.append(("malloc", address, nbytes))
        return address

    def raw_free(self, index: int, address: int, nbytes: int) -> None:
        super().raw_free(index, address, nbytes)
        self.calls.append(("free", address, nbytes))


@pytest.fixture(autouse=True, params=["compiled", "python"])
def hot_path(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Every test twice: the allocator's hot requests (track, storages' deaths, reclaiming) served by the compiled
    StorageTracker (torch_dipu._fastalloc), then by the Python methods alone."""
    compiled = request.param == "compiled"
    if compiled and dispatch._fastalloc is None:
        pytest.skip("torch_dipu._fastalloc was not built (no C compiler)")
    dispatch.set_fast_path(compiled)
    try:
        yield compiled
    finally:
        dispatch.set_fast_path(True)


def same_hot_path(alloc: CachingAllocator) -> None:
    """Serve ``alloc``'s hot requests as the device's allocator's are served (the ``hot_path`` of the test)."""
    alloc.use_compiled(dispatch._fastalloc if get_state().memory._tracker is not None else None)


def allocator(algorithm: str, capacity: int = 1 << 30) -> tuple[CachingAllocator, Vendor]:
    vendor = Vendor(capacity)
    alloc = CachingAllocator(vendor, algorithm)
    alloc.resize([capacity])
    same_hot_path(alloc)
    return alloc, vendor


def test_bf_rounds_splits_reuses_and_merges():
    alloc, vendor = allocator("BF")
    a = alloc.malloc(0, 1000)
    b = alloc.malloc(0, 3000)
    assert (a.size, b.size) == (1024, 3072)  # rounded up to 512 bytes
    assert vendor.calls == [("malloc", a.address, 2 * MiB)]  # one small segment serves both
    assert b.address == a.address + 1024
    assert alloc.allocated(0) == 4096 and alloc.reserved(0) == 2 * MiB
    alloc.free(a)
    c = alloc.malloc(0, 600)  # best fit: the freed 1024-byte hole, not the big tail
    assert c.address == a.address and c.size == 1024
    alloc.free(c)
    alloc.free(b)  # neighbours merge back into one free block spanning the segment
    (segment,) = alloc.snapshot()
    assert [(blk["size"], blk["state"]) for blk in segment["blocks"]] == [(2 * MiB, "inactive")]
    big = alloc.malloc(0, 3 * MiB)  # large: a 20 MiB segment
    mid = alloc.malloc(0, 11 * MiB)  # best fit: the 17 MiB tail of that segment
    huge = alloc.malloc(0, 17 * MiB + 1)  # >= 10 MiB and no block fits: its size rounded up to 2 MiB
    assert [n for op, _, n in vendor.calls if op == "malloc"][1:] == [20 * MiB, 18 * MiB]
    assert mid.address == big.address + 3 * MiB and big.size == 3 * MiB and huge.size == 18 * MiB
    assert alloc.stats(0)["num_device_alloc"] == 3


def test_bf_holds_freed_blocks_for_their_size_and_merges_them_before_a_new_segment():
    alloc, vendor = allocator("BF")
    quarter = 512 * 1024
    blocks = [alloc.malloc(0, quarter) for _ in range(4)]  # fill one 2 MiB segment
    for blk in blocks[:3]:
        alloc.free(blk)
    again = alloc.malloc(0, quarter - 100)  # same rounded size: the last freed block, held, taken back
    assert again.address == blocks[2].address and again.size == quarter
    alloc.free(again)
    alloc.free(blocks[3])
    assert alloc.allocated(0) == 0 and alloc.reserved(0) == 2 * MiB
    half = alloc.malloc(0, MiB)  # no held block of this size, none free: the held ones merge first
    assert [op for op, _, _ in vendor.calls] == ["malloc"] and half.address == blocks[0].address
    alloc.free(half)
    (segment,) = alloc.snapshot()  # a snapshot shows held blocks merged with their neighbours
    assert [(blk["size"], blk["state"]) for blk in segment["blocks"]] == [(2 * MiB, "inactive")]
    stats = alloc.stats(0)
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 6
    assert stats["allocated_bytes.all.peak"] == 2 * MiB and stats["requested_bytes.all.peak"] == 2 * MiB


def test_a_dead_storage_is_counted_free_by_every_figure(fresh_cache):
    alloc = get_state().memory
    before = torch.dipu.memory_allocated()
    x = torch.empty(1000, device="dipu")
    assert torch.dipu.memory_allocated() == before + 4096
    del x  # queued by the weak reference's callback, freed by the next figure
    assert torch.dipu.memory_allocated() == before
    y = torch.empty(1000, device="dipu")
    del y
    assert alloc.stats(0)["allocation.all.current"] == alloc.stats(0)["allocation.all.allocated"] - \
        alloc.stats(0)["allocation.all.freed"]
    assert not any(b["requested_size"] == 4000 for s in torch.dipu.memory_snapshot() for b in s["blocks"])


def test_bf_empty_cache_releases_holes_and_tails_exactly():
    alloc, vendor = allocator("BF")
    blocks = [alloc.malloc(0, 100 * 1024) for _ in range(6)]
    for blk in blocks[1::2]:
        alloc.free(blk)
    alloc.empty_cache()
    assert alloc.reserved(0) == alloc.allocated(0) == 3 * 100 * 1024
    freed = sorted((a, n) for op, a, n in vendor.calls if op == "free")
    assert freed[0] == (blocks[1].address, 100 * 1024)  # a hole inside the segment went back to the vendor
    snapshot = alloc.snapshot()
    assert len(snapshot) == 3 and all(s["total_size"] == s["allocated_size"] == 100 * 1024 for s in snapshot)
    for blk in blocks[0::2]:
        alloc.free(blk)
    alloc.empty_cache()
    assert alloc.reserved(0) == alloc.allocated(0) == 0 and alloc.snapshot() == []
    stats = alloc.stats(0)
    assert stats["num_device_free"] == len(freed) + 3 and stats["reserved_bytes.all.peak"] == 2 * MiB


def test_bs_power_of_two_bins_without_splitting():
    alloc, vendor = allocator("BS")
    a = alloc.malloc(0, 3000)
    assert a.size == 4096 and vendor.calls == [("malloc", a.address, 4096)]
    alloc.free(a)
    b = alloc.malloc(0, 2049)  # same bin: the cached block, no vendor call
    assert b.address == a.address and len(vendor.calls) == 1
    c = alloc.malloc(0, 100)
    assert c.size == 512
    alloc.free(b)
    alloc.empty_cache()
    assert alloc.reserved(0) == alloc.allocated(0) == 512


def test_raw_goes_to_the_vendor_every_time():
    alloc, vendor = allocator("RAW")
    for _ in range(3):
        alloc.free(alloc.malloc(0, 5000))
    assert [op for op, _, _ in vendor.calls] == ["malloc", "free"] * 3
    assert vendor.calls[0][2] == 5120 and alloc.reserved(0) == 0


def test_oom_releases_the_cache_retries_then_names_asked_allocated_reserved():
    alloc, vendor = allocator("BF", capacity=24 * MiB)
    keep = alloc.malloc(0, 20 * MiB)  # a segment of its own size
    alloc.free(alloc.malloc(0, 4096))  # a 2 MiB small segment, cached
    assert alloc.reserved(0) == 22 * MiB
    retried = alloc.malloc(0, 3 * MiB)  # no room for a 20 MiB segment: cache released, then its own size
    assert alloc.stats(0)["num_alloc_retries"] == 1 and alloc.reserved(0) == alloc.allocated(0) == 23 * MiB
    with pytest.raises(torch.OutOfMemoryError) as info:
        alloc.malloc(0, 5 * MiB - 100)
    message = str(info.value)
    assert message.startswith("DIPU out of memory. Tried to allocate 5.00 MiB. Device dipu:0 (testvendor) has a "
                              "total capacity of 24.00 MiB of which 1.00 MiB is free.")
    assert "Of the allocated memory 23.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but " \
           "unallocated." in message
    assert alloc.stats(0)["num_ooms"] == 1
    alloc.free(keep)
    alloc.free(retried)


def test_vendor_rejects_unknown_and_double_frees_naming_the_address():
    vendor = Vendor()
    address = vendor.raw_malloc(0, 4096)
    vendor.raw_free(0, address + 1024, 1024)  # a sub-range (CUDA's expandable segments unmap pages)
    vendor.raw_free(0, address, 1024)
    with pytest.raises(RuntimeError, match=f"raw_free of address {hex(address)} .*double free"):
        vendor.raw_free(0, address, 1024)
    with pytest.raises(RuntimeError, match="0x1234"):
        vendor.raw_free(0, 0x1234, 512)
    vendor.raw_free(0, address + 2048, 2048)


@pytest.fixture
def fresh_cache():
    gc.collect()
    torch.dipu.empty_cache()
    yield
    gc.collect()
    torch.dipu.empty_cache()


def test_device_figures_snapshot_and_empty_cache(fresh_cache):
    assert torch.dipu.memory_reserved() == torch.dipu.memory_allocated()
    x = torch.empty(1000, device="dipu")
    address = x.untyped_storage().data_ptr()
    assert address  # the host buffer; the block's address is the allocator's
    blocks = [b for s in torch.dipu.memory_snapshot() for b in s["blocks"] if b["state"] == "active_allocated"]
    assert {"size": 4096, "requested_size": 4000} in [{k: b[k] for k in ("size", "requested_size")} for b in blocks]
    assert torch.dipu.memory_reserved() >= torch.dipu.memory_allocated() + 2 * MiB - 4096
    del x
    reserved = torch.dipu.memory_reserved()
    assert reserved > torch.dipu.memory_allocated()
    assert torch.dipu.max_memory_reserved() >= reserved
    free, total = torch.dipu.mem_get_info()
    assert free == total - reserved
    torch.dipu.empty_cache()
    assert torch.dipu.memory_reserved() == torch.dipu.memory_allocated()


def test_caching_allocator_alloc_and_delete(fresh_cache):
    before = torch.dipu.memory_allocated()
    address = torch.dipu.caching_allocator_alloc(10000)
    assert torch.dipu.memory_allocated() == before + 10240
    assert any(b["address"] == address for s in torch.dipu.memory_snapshot() for b in s["blocks"])
    torch.dipu.caching_allocator_delete(address)
    assert torch.dipu.memory_allocated() == before
    with pytest.raises(RuntimeError, match=f"caching_allocator_delete: address {hex(address)} .*already freed"):
        torch.dipu.caching_allocator_delete(address)
    with pytest.raises(RuntimeError, match="address 0x42 "):
        torch.dipu.caching_allocator_delete(0x42)


def test_capacity_counts_reserved_memory_and_oom_releases_the_cache(fresh_cache):
    base = torch.dipu.memory_reserved()
    with droplet.switches(memory_capacity=base + 4 * MiB):
        x = torch.ones(1 << 18, device="dipu")  # 1 MiB: a 2 MiB small segment
        del x
        assert torch.dipu.memory_reserved() == base + 2 * MiB
        y = torch.ones(3 << 18, device="dipu")  # 3 MiB: the cache goes back to the vendor first
        assert torch.dipu.memory_stats()["num_alloc_retries"] >= 1
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 2.00 MiB.*3.00 MiB is allocated"):
            torch.ones(1 << 19, device="dipu")
        del y


# -- a small training run under every algorithm -------------------------------------------------------------

@contextlib.contextmanager
def allocator_in_use(algorithm: str) -> Iterator[CachingAllocator]:
    """A fresh allocator of ``algorithm`` as ``state.memory`` (dispatch handlers rebuilt around it); afterwards its
    cache goes back to the vendor, whose capacity later tests share."""
    state = get_state()
    saved = state.memory
    fresh = CachingAllocator(state.runtime, algorithm)
    fresh.resize([state.runtime.memory_capacity(p) for p in state.physical], state.physical)
    same_hot_path(fresh)
    state.memory = fresh
    dispatch.clear_handlers()
    try:
        yield fresh
    finally:
        state.memory = saved
        dispatch.clear_handlers()
        gc.collect()
        fresh.empty_cache()


def train(checked: bool = False) -> dict:
    model = tiny_qwen().to("dipu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, device_allocs, ok = [], [], True
    for ids in token_batches(steps=4):
        ids = ids.to("dipu")
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        ok &= torch.dipu.memory_reserved() >= torch.dipu.memory_allocated()
        optimizer.step()
        losses.append(loss.item())
        device_allocs.append(torch.dipu.memory_stats()["num_device_alloc"])
    del model, optimizer, loss, ids
    gc.collect()
    torch.dipu.empty_cache()
    return dict(losses=losses, device_allocs=device_allocs, ok=ok,
                after=(torch.dipu.memory_reserved(), torch.dipu.memory_allocated()))


def test_training_losses_bitwise_equal_under_every_algorithm_and_the_checker():
    runs = {}
    for name in ("BF", "BS", "RAW", "BF+check"):
        with allocator_in_use(name.split("+")[0]):
            if name.endswith("check"):
                mem_check.enable(backtrace=True)
            try:
                runs[name] = train()
            finally:
                mem_check.disable()
        assert runs[name]["ok"], name
        assert runs[name]["after"] == (0, 0), name  # everything freed, and empty_cache returned the cache
    assert runs["BF"]["losses"] == runs["BS"]["losses"] == runs["RAW"]["losses"] == runs["BF+check"]["losses"]
    for name in ("BF", "BS"):  # the cache serves every later step: no vendor malloc after the first ones
        allocs = runs[name]["device_allocs"]
        assert allocs[-1] == allocs[1], (name, allocs)
    raw = runs["RAW"]["device_allocs"]
    assert raw[-1] - raw[-2] > 50


def test_a_storage_dying_inside_an_allocator_call_is_freed_after_it():
    class DropOnAlloc:  # stands in for a garbage collection that frees a tensor while the allocator works
        def __init__(self, victims: list) -> None:
            self.victims = victims

        def on_alloc(self, block: object) -> None:
            self.victims.clear()

        def on_free(self, block: object) -> None:
            pass

    with allocator_in_use("BF") as alloc:
        victims = [torch.empty(1000, device="dipu")]
        assert alloc.allocated(0) == 4096
        alloc.observer = DropOnAlloc(victims)
        y = torch.empty(300, device="dipu")
        alloc.observer = None
        assert not victims and alloc.allocated(0) == 1536  # the victim's block was freed once the call ended
        del y
        alloc.empty_cache()
        assert alloc.reserved(0) == alloc.allocated(0) == 0


def test_algorithm_from_env_and_unknown_one_is_one_clear_error(run_python):
    code = "import torch_dipu; print(torch_dipu.state.get_state().memory.algorithm)"
    assert run_python(code, env={"DIPU_DEVICE_MEMCACHING_ALGORITHM": "bs"}).stdout.strip() == "BS"
    out = run_python(code, env={"DIPU_DEVICE_MEMCACHING_ALGORITHM": "LRU"}, check=False)
    assert out.returncode != 0
    assert "DIPU_DEVICE_MEMCACHING_ALGORITHM='LRU' is not an allocator algorithm" in out.stderr


def test_state_memory_is_the_caching_allocator():
    assert isinstance(get_state().memory, CachingAllocator)
    assert get_state().memory.algorithm == "BF"
