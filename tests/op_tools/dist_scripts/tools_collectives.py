"""OpTimeMeasure, OpCapture and OpOverflowCheck on every rank: collectives are rows and cases, every row has its
rank, and the ranks of one launch share one run folder; a NaN that rank 1 sends is flagged on rank 0 at the
all_reduce that brought it. Run under torchrun with 2 processes; ``argv[1]`` is the results
folder. Rank 0 prints ``RESULT {json}`` (one entry per rank).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401  (the dipu device and its dicl backend)
from op_tools import OpCapture, OpOverflowCheck, OpTimeMeasure

device = torch.accelerator.current_accelerator()
dist.init_process_group(dist.get_default_backend_for_device(device))
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.full((4,), float(rank + 1), device=device)
received = None
with (OpTimeMeasure(results_dir=sys.argv[1], mode="sync", top=0) as timer,
      OpCapture(results_dir=sys.argv[1], ops=r"torch\.distributed\..*") as capture,
      OpOverflowCheck(results_dir=sys.argv[1]) as overflow):
    y = x * 2
    dist.all_reduce(y)  # 2 + 4 on every rank
    dist.broadcast(y, src=0)
    if rank == 0:
        dist.send(x, dst=1)
    elif rank == 1:
        received = torch.empty_like(x)
        dist.recv(received, src=0)
    dist.barrier()
    z = torch.full((2,), float("nan") if rank == 1 else 1.0, device=device)
    dist.all_reduce(z)
seen = [None] * world
dist.all_gather_object(seen, {
    "rank": rank, "y": y.cpu().tolist(), "received": None if received is None else received.cpu().tolist(),
    "timer_dir": str(timer.run_dir), "capture_dir": str(capture.run_dir), "captured": capture.captured,
    "flagged": [(r["name"], r["rank"]) for r in overflow.results if r["verdict"] == "FAIL"],
    "restored": not hasattr(dist.all_reduce, "__op_tools_original__")})
if rank == 0:
    print("RESULT " + json.dumps(seen), flush=True)
dist.destroy_process_group()
