"""Data-parallel training with torchrun, written as the PyTorch examples write it (no vendor named anywhere).

    torchrun --standalone --nproc_per_node 2 ddp_torchrun.py [--setup accelerator|cuda] [--epochs N]

``--setup accelerator`` (default) follows pytorch/examples' DDP tutorial (multigpu_torchrun.py): the device
comes from ``torch.accelerator``, the backend from ``torch.distributed.get_default_backend_for_device``, the
model goes ``.to(device)`` and ``DistributedDataParallel(model, device_ids=[...])``. ``--setup cuda`` is the
CUDA way: ``init_process_group("nccl")``, ``torch.cuda.set_device``, ``DistributedDataParallel(model.cuda())``.
Both feed a ``DataLoader`` with a ``DistributedSampler``. Each rank prints ``rank R key: value`` lines (backend,
device, steps, mean loss of the first and last epoch, a checksum of the parameters) that the tests check.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup(kind: str) -> torch.device:
    local_rank = int(os.environ["LOCAL_RANK"])
    if kind == "cuda":
        init_process_group(backend="nccl")
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    # One device per process; ranks share devices when the machine has fewer devices than ranks.
    device = torch.device(f"{torch.accelerator.current_accelerator()}:{local_rank % torch.accelerator.device_count()}")
    torch.accelerator.set_device_index(device.index)
    backend = torch.distributed.get_default_backend_for_device(device)
    init_process_group(backend=backend, device_id=device)
    return device


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setup", choices=["accelerator", "cuda"], default="accelerator")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=8)
    args = parser.parse_args()

    device = setup(args.setup)
    rank = torch.distributed.get_rank()
    torch.manual_seed(0)
    inputs = torch.randn(128, 20)
    dataset = TensorDataset(inputs, inputs[:, :4].sum(1, keepdim=True))  # a target the model can learn
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = DDP(model.cuda()) if args.setup == "cuda" else DDP(model.to(device), device_ids=[device.index])
    loader = DataLoader(dataset, batch_size=args.batch_size, pin_memory=True, shuffle=False,
                        sampler=DistributedSampler(dataset))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    losses, steps = [], 0
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in loader:
            source, targets = source.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(model(source), targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
            steps += 1
        losses.append(total / len(loader))

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    accelerator = torch.accelerator.current_accelerator()
    lines = [
        f"rank {rank} backend: {torch.distributed.get_backend()}",
        f"rank {rank} default backend: {torch.distributed.get_default_backend_for_device(accelerator)}",
        f"rank {rank} device: {next(model.parameters()).device}",
        f"rank {rank} steps: {steps}",
        f"rank {rank} first epoch loss: {losses[0]:.6f}",
        f"rank {rank} last epoch loss: {losses[-1]:.6f}",
        f"rank {rank} checksum: {checksum:.12e}",
    ]
    sys.stdout.write("".join(line + "\n" for line in lines))  # one write: the ranks share the launcher's stdout
    sys.stdout.flush()
    destroy_process_group()


if __name__ == "__main__":
    main()
