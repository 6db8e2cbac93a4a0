"""Memory statistics and droplet's memory capacity."""

from __future__ import annotations

import copy
import gc

import pytest
import torch

from torch_dipu.vendors import droplet


@pytest.fixture(autouse=True)
def _collect():
    gc.collect()
    yield


def test_allocation_counts_rounded_blocks_and_returns_after_del():
    before = torch.dipu.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device="dipu")
    assert torch.dipu.memory_allocated() == before + 4096  # 4000 bytes in a block rounded to 512, as CUDA's
    y = torch.zeros(10, 10, dtype=torch.float16, device="dipu")
    assert torch.dipu.memory_allocated() == before + 4096 + 512
    views = [x[10:], x.view(10, 100), x.t() if x.dim() == 2 else x.unsqueeze(0), y.t(), y[0]]
    assert torch.dipu.memory_allocated() == before + 4608, "views share storage and must not add bytes"
    del x, y, views
    assert torch.dipu.memory_allocated() == before
    assert torch.dipu.memory_allocated("dipu:0") == before


def test_peak_and_reset():
    torch.dipu.reset_peak_memory_stats()
    base = torch.dipu.memory_allocated()
    assert torch.dipu.max_memory_allocated() == base
    x = torch.ones(1 << 16, device="dipu")  # 256 KiB
    del x
    assert torch.dipu.max_memory_allocated() == base + (1 << 18)
    assert torch.dipu.memory_allocated() == base
    torch.dipu.reset_peak_memory_stats()
    assert torch.dipu.max_memory_allocated() == base
    torch.dipu.empty_cache()
    stats = torch.dipu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current"):
        assert key in stats
    assert stats["allocated_bytes.all.current"] == base


def test_capacity_raises_cuda_like_oom():
    base = torch.dipu.memory_allocated()
    with droplet.switches(memory_capacity=base + (1 << 20)):
        small = torch.empty(1 << 18, device="dipu")  # exactly 1 MiB fits
        del small
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(1 << 19, device="dipu")  # 2 MiB
        assert str(info.value).startswith("DIPU out of memory. Tried to allocate 2.00 MiB")
        x = torch.ones(1 << 17, device="dipu")  # 512 KiB
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 512.00 KiB"):
            x * 2 + x  # an operator's output also counts
        del x
    assert torch.dipu.memory_allocated() == base
    torch.empty(1 << 19, device="dipu")  # capacity restored


def test_capacity_from_env_and_configure_string(run_python):
    out = run_python(
        """
        import torch, torch_dipu
        from torch_dipu.vendors import droplet
        assert torch.dipu.get_device_properties().total_memory == 1 << 20
        torch.empty(1 << 18, device="dipu")
        try:
            torch.empty(1 << 19, device="dipu")
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        droplet.configure(memory_capacity="4MiB")
        torch.empty(1 << 19, device="dipu")
        print("ok")
        """,
        env={"DROPLET_MEMORY_CAPACITY": "1MiB"},
    )
    assert "OOM: DIPU out of memory. Tried to allocate 2.00 MiB" in out.stdout
    assert out.stdout.strip().endswith("ok")


def test_deepcopy_accounts_the_copied_storage():
    model = torch.nn.Linear(64, 32).dipu()
    model(torch.randn(4, 64, device="dipu")).sum().backward()
    before = torch.dipu.memory_allocated()
    clone = copy.deepcopy(model)
    param_bytes = 64 * 32 * 4 + 512  # the bias's 128 bytes take a 512-byte block
    assert torch.dipu.memory_allocated() - before == 2 * param_bytes  # parameters and their grads
    assert isinstance(clone.weight, torch.nn.Parameter) and clone.weight.requires_grad
    assert torch.equal(clone.weight.grad.cpu(), model.weight.grad.cpu())
