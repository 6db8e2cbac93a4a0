"""DDP and FSDP2 on dipu over dicl, launched with torchrun, against one process on the whole batch.

The multi-process checks run ``dist_scripts/ddp_w1.py`` (see its docstring): one launch on 2 processes (DDP,
``no_sync`` gradient accumulation, a checkpoint round trip, FSDP2) and one on 4 (DDP). Every launch has a
timeout and its process group is killed when it passes, so a hang fails the test instead of blocking the suite.
The in-process tests cover what FSDP2 needed from torch_dipu: resizing a dipu tensor's storage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401
from dist_launch import result_line, torchrun
from torch_dipu.vendors import droplet

SCRIPTS = Path(__file__).resolve().parent / "dist_scripts"


def launch(script: str, nproc: int, *args: str, cwd: Path | None = None) -> dict:
    """``script`` under torchrun on ``nproc`` processes (bounded); the ``RESULT {json}`` of rank 0."""
    proc = torchrun(SCRIPTS / script, *args, nproc=nproc, cwd=cwd)
    assert proc.returncode == 0, f"{script} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return result_line(proc)


def assert_all_ok(result: dict) -> None:
    failed = {name: detail for name, (ok, detail) in result.items() if not ok}
    assert not failed, json.dumps(failed, indent=1)


def test_ddp_no_sync_checkpoint_and_fsdp2_on_two_processes(tmp_path):
    result = launch("ddp_w1.py", 2, "ddp,no_sync,checkpoint,fsdp", "--out", str(tmp_path), cwd=tmp_path)
    assert_all_ok(result)
    assert {"ddp_params_equal_single_process", "ddp_params_same_across_ranks", "ddp_several_buckets",
            "no_sync_no_reduction_inside", "no_sync_grads_equal_single_process", "checkpoint_round_trip",
            "fsdp_losses_equal_single_process", "fsdp_params_equal_single_process", "fsdp_losses_equal_ddp",
            "fsdp_parameters_sharded"} <= set(result)
    assert (tmp_path / "ddp_w1.safetensors").stat().st_size > 2_000_000  # W1's 551,552 float32 parameters
    losses = json.loads(result["figures"][1])["ref_losses"]
    assert losses[-1] < losses[0]  # the model trained


def test_ddp_on_four_processes():
    result = launch("ddp_w1.py", 4, "ddp")
    assert_all_ok(result)
    assert result["world_size"][1] == "4" and "ddp_params_equal_single_process" in result


# -- what FSDP2 needs from the device: a storage that can be freed and allocated again in place -------------


def test_storage_resize_frees_and_reallocates_in_place():
    """FSDP2 frees an unsharded parameter with ``untyped_storage().resize_(0)`` and allocates it again with
    ``resize_(nbytes)`` before the next all-gather writes into it: views made before (those autograd saved)
    must see the new memory, and the allocator must account for both."""
    t = torch.zeros(256, device="dipu")
    view = t.view(16, 16)[2:]
    before = torch.dipu.memory_allocated()
    t.untyped_storage().resize_(0)
    assert t.untyped_storage().nbytes() == 0 and t.untyped_storage().data_ptr() == 0
    assert torch.dipu.memory_allocated() == before - 1024
    resized = t.untyped_storage().resize_(1024)
    assert resized.nbytes() == 1024 and resized.data_ptr() == t.data_ptr() == t.untyped_storage().data_ptr() != 0
    assert torch.dipu.memory_allocated() == before
    t.copy_(torch.arange(256.0))
    assert torch.equal(view.cpu(), torch.arange(32.0, 256.0).view(14, 16))
    view.fill_(-1.0)
    assert t[31].item() == 31.0 and t[32].item() == -1.0


def test_storage_resize_out_of_memory_leaves_the_storage():
    t = torch.ones(4, device="dipu")
    torch.dipu.empty_cache()  # a block an earlier test freed would serve the request from the cache, with no OOM
    capacity = torch.dipu.memory_reserved() + (1 << 20)
    with droplet.switches(memory_capacity=capacity), pytest.raises(torch.OutOfMemoryError):
        t.untyped_storage().resize_(64 << 20)
    assert t.untyped_storage().nbytes() == 16 and t.cpu().tolist() == [1.0] * 4
