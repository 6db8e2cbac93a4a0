"""A rank that misbehaves in the middle of DDP training on dipu: every process must end, and the output must name
the rank and the collective.

    python -m torch.distributed.run --standalone --nproc_per_node 2 faults.py {killed,raises,mismatch,absent}

A one-layer model in ``DistributedDataParallel`` trains with SGD; the group's timeout is 5 s. In step 2 rank 1:

- ``killed``: kills itself with SIGKILL after its forward pass (mid-step), once rank 0 waits in the step's gradient
  all_reduce (it watches for rank 0's arrival mark in the group's store, so the order does not depend on timing);
- ``raises``: raises ``RuntimeError("injected failure in step 2")`` at the same point;
- ``mismatch``: every rank all-reduces its loss before the backward pass, rank 1 a tensor of another shape;
- ``absent``: never calls the step's all_reduce (it sleeps until the launcher ends it).

A rank that finishes the loop prints ``REACHED-END rank <r>``, which none may.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401  (registers dipu and dicl)
from torch_dipu import dicl_watch

RANK = int(os.environ["RANK"])
FAULT = sys.argv[1]


def wait_until_rank0_waits_in_next_call() -> None:
    """Return once rank 0 has marked its arrival in this group's next collective (dicl_watch.arrival_key)."""
    state = dicl_watch.group_state(dist.group.WORLD)
    state.store.wait([dicl_watch.arrival_key(state.calls + 1, 0)], datetime.timedelta(seconds=120))


def main() -> None:
    dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=5))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).to("dipu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 4):
        loss = model(torch.randn(4, 8, device="dipu")).square().mean()
        if step == 2 and RANK == 1:
            if FAULT == "killed":
                wait_until_rank0_waits_in_next_call()
                os.kill(os.getpid(), signal.SIGKILL)
            if FAULT == "raises":
                wait_until_rank0_waits_in_next_call()
                raise RuntimeError("injected failure in step 2")
            if FAULT == "absent":
                time.sleep(3600)
        if step == 2 and FAULT == "mismatch":
            dist.all_reduce(loss.detach().reshape(1).repeat(RANK + 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"REACHED-END rank {RANK}", flush=True)


if __name__ == "__main__":
    main()
