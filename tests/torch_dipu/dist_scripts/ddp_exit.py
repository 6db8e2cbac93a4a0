"""The lightest DDP training job on dipu: it must end, every time.

    python -m torch.distributed.run --standalone --nproc_per_node 2 ddp_exit.py [--destroy]

A one-layer model wrapped in ``DistributedDataParallel`` trains two SGD steps, then the script simply ends: the
interpreter's teardown destroys the DDP reducer and, with it, the process group (``--destroy``: the script calls
``destroy_process_group()`` first). Each rank prints ``EXIT-READY rank <r>`` as its last line.
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401  (registers dipu and dicl)

RANK = int(os.environ["RANK"])

dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=60))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).to("dipu"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    loss = model(torch.randn(4, 8, device="dipu")).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if "--destroy" in sys.argv:
    dist.destroy_process_group()
print(f"EXIT-READY rank {RANK}", flush=True)
