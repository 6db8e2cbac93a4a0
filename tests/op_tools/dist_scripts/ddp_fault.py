"""A small MLP trained with DDP on the accelerator, with a droplet fault (every ``linear`` result off by 0.5) on
rank 1 only. Run under torchrun and ``ditorch run --autocompare``: rank 1's summary must name rank 1 and
``torch.nn.functional.linear``, rank 0's must have no FAIL. Rank 0 prints ``RESULT {json}`` (what every rank
saw of one explicit ``all_reduce`` and ``broadcast``: run once each, never again on the CPU).
"""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torch_dipu.vendors import droplet

device = torch.accelerator.current_accelerator()
dist.init_process_group(dist.get_default_backend_for_device(device))
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 1:
    droplet.configure(faults="linear:bias:0.5")

torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
for _ in range(2):
    x, y = torch.randn(8, 6, generator=generator).to(device), torch.randn(8, 3, generator=generator).to(device)
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

t = torch.full((3,), float(rank + 1), device=device)
dist.all_reduce(t)  # 1 + 2 on every rank; twice in place would be 6
dist.broadcast(t, src=1)
seen = [None] * world
dist.all_gather_object(seen, {"rank": rank, "value": t.cpu().tolist()})
if rank == 0:
    print("RESULT " + json.dumps(seen), flush=True)
dist.destroy_process_group()
