"""dicl, the torch.distributed backend of dipu: every collective on 2 processes equals gloo on CPU tensors;
mismatched calls, a dead peer and a silent peer are clear errors within a bound, never a hang."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from dist_launch import result_line, torchrun  # tests/dist_launch.py (tests/ is on sys.path through its conftest)
from torch_dipu import dicl
from torch_dipu.config import DipuConfig

SCRIPTS = Path(__file__).parent / "dist_scripts"
COLLECTIVES = [
    "all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_reduce_min", "all_reduce_product", "all_reduce_int64",
    "all_reduce_bf16", "all_reduce_storage_offset", "async_all_reduce", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
    "all_to_all_single_uneven", "send_recv", "isend_irecv", "gather", "scatter", "barrier", "backend",
    "default_backend_for_accelerator",
]


@pytest.fixture(scope="module")
def collectives() -> dict:
    return result_line(torchrun(SCRIPTS / "collectives.py", "dicl"))


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_on_dipu_equals_gloo_on_cpu(collectives, name):
    ok, detail = collectives[name]
    assert ok, detail


def test_cuda_written_code_gets_dicl_under_ditorch():
    """``init_process_group("nccl")`` under ``import ditorch`` is dicl on dipu, and the collectives hold."""
    result = result_line(torchrun(SCRIPTS / "collectives.py", "nccl", env={"DITORCH_DISABLE_MOCK": "0"}))
    assert result["backend"] == [True, "dicl"]
    assert result["default_backend_for_accelerator"] == [True, "dipu"]
    assert all(ok for ok, _ in result.values()), {k: v for k, v in result.items() if not v[0]}


def test_default_backend_for_dipu_is_dicl_in_process():
    assert dist.get_default_backend_for_device("dipu") == "dicl"
    assert dist.get_default_backend_for_device(torch.device("dipu", 0)) == "dicl"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # dicl does not take the host's default


def test_mismatched_calls_are_errors_on_every_rank():
    ranks = result_line(torchrun(SCRIPTS / "bad_input.py", "mismatch"))
    for rank, errors in enumerate(ranks):
        assert errors["shape"] == (f"DiclError: dicl all_reduce on rank {rank}: the tensors differ across ranks "
                                   f"(rank 0: float32[4], rank 1: float32[5]); every rank must pass the same dtype "
                                   f"and shape")
        assert "(rank 0: float32[4], rank 1: float64[4])" in errors["dtype"]
        called = "all_reduce" if rank == 0 else "broadcast"
        assert errors["collective"] == (f"DiclError: dicl {called} on rank {rank}: the ranks called different "
                                        f"collectives (rank 0 called all_reduce, rank 1 called broadcast)")
        assert errors["all_gather_shape"].startswith(f"DiclError: dicl all_gather_into_tensor on rank {rank}: ")
        assert errors["after"] == [3.0, 3.0, 3.0]  # the group is still usable


@pytest.mark.parametrize(("kind", "diagnosis"), [
    ("dead_peer", "rank 1 had not called it and its process stopped without an exit note (killed, or crashed)"),
    ("silent_peer", "rank 1 did not call it within the group's timeout (0:00:05)"),
], ids=["dead_peer", "silent_peer"])
def test_lost_peer_fails_within_the_timeout(kind, diagnosis):
    result = result_line(torchrun(SCRIPTS / "bad_input.py", kind, timeout=120))
    assert result["error"] is not None and result["error"].startswith("DiclError: dicl all_reduce failed on rank 0 "
                                                                      f"of 2: {diagnosis} (call 2 on group 0; ")
    assert result["seconds"] < 60  # the group timeout is 5 s; the bound only catches a hang


def test_check_switch_is_parsed(monkeypatch):
    monkeypatch.setenv("DICL_CHECK_COLLECTIVES", "0")
    assert DipuConfig.from_env().check_collectives is False
    monkeypatch.setenv("DICL_CHECK_COLLECTIVES", "maybe")
    with pytest.raises(ValueError, match="DICL_CHECK_COLLECTIVES"):
        DipuConfig.from_env()
    monkeypatch.delenv("DICL_CHECK_COLLECTIVES")
    assert DipuConfig.from_env().check_collectives is True


def test_unsupported_c10d_op_names_itself():
    class FakeOp:
        _opname = "made_up_"
    with pytest.raises(NotImplementedError, match="c10d.made_up_"):
        dicl.build_handler(FakeOp())


def test_fingerprint_describes_what_differs():
    args = {"tensors": [torch.ones(2, 3, dtype=torch.bfloat16)]}
    row = dicl._fingerprint("allreduce_", "shape:tensors", args).tolist()
    assert dicl._describe(row) == "bfloat16[2, 3]"
    assert datetime.timedelta(milliseconds=5) == dicl._opts(dist.AllreduceOptions, {"timeout": 5}).timeout
