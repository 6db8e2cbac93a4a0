"""Collectives called wrongly on dipu tensors over dicl: each must be a clear error on every rank, never a hang.

``bad_input.py mismatch``: several mismatched calls in a row (the ranks stay in step: every rank raises at the
check, before any data moves); rank 0 prints ``RESULT {json}`` mapping each case to the error texts of all ranks.
``bad_input.py dead_peer``: rank 1 exits after joining; rank 0's all_reduce must fail within the group timeout.
``bad_input.py silent_peer``: rank 1 stays alive but never calls the collective.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401

RANK = int(os.environ["RANK"])


def mismatch() -> None:
    dist.init_process_group("dicl")
    cases = {
        "shape": lambda: dist.all_reduce(torch.ones(4 + RANK, device="dipu")),
        "dtype": lambda: dist.all_reduce(torch.ones(4, device="dipu",
                                                    dtype=torch.float32 if RANK == 0 else torch.float64)),
        "collective": lambda: (dist.all_reduce(torch.ones(4, device="dipu")) if RANK == 0
                               else dist.broadcast(torch.ones(4, device="dipu"), src=0)),
        "all_gather_shape": lambda: dist.all_gather_into_tensor(
            torch.empty(2 * (3 + RANK), device="dipu"), torch.ones(3 + RANK, device="dipu")),
    }
    errors = {}
    for name, call in cases.items():
        try:
            call()
            errors[name] = None
        except Exception as exc:  # the test reads type and text
            errors[name] = f"{type(exc).__name__}: {exc}"
    t = torch.full((3,), float(RANK + 1), device="dipu")  # the group still works after the errors
    dist.all_reduce(t)
    errors["after"] = t.cpu().tolist()
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, errors)
    if RANK == 0:
        print("RESULT " + json.dumps(gathered), flush=True)
    dist.destroy_process_group()


def lost_peer(kind: str) -> None:
    dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=5))
    dist.all_reduce(torch.ones(2, device="dipu"))  # everyone is connected
    if RANK == 1:
        if kind == "dead_peer":
            os._exit(0)
        time.sleep(20)  # alive, but never calls the collective
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(2, device="dipu"))
        outcome = None
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    print("RESULT " + json.dumps({"error": outcome, "seconds": time.monotonic() - start}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    mismatch() if sys.argv[1] == "mismatch" else lost_peer(sys.argv[1])
