"""A two-process NCCL all_reduce, written exactly as a CUDA user writes one.

    RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 python allreduce_nccl.py &
    RANK=1 WORLD_SIZE=2 MASTER_PORT=29500 python allreduce_nccl.py
    python allreduce_nccl.py RANK WORLD_SIZE PORT          # the same, from the command line

Each rank contributes ``[rank + 1, 10 * (rank + 1)]``; every rank prints the summed tensor and checks it.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    if len(sys.argv) == 4:
        rank, world_size, port = (int(v) for v in sys.argv[1:])
    else:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        port = int(os.environ.get("MASTER_PORT", "29500"))

    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    t = torch.tensor([rank + 1.0, 10.0 * (rank + 1)]).cuda()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    torch.cuda.synchronize()

    expected = [sum(r + 1.0 for r in range(world_size)), sum(10.0 * (r + 1) for r in range(world_size))]
    print(f"rank {rank} backend: {dist.get_backend()}")
    print(f"rank {rank} device: {t.device}")
    print(f"rank {rank} all_reduce: {t.tolist()}")
    assert t.tolist() == expected, (t.tolist(), expected)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
