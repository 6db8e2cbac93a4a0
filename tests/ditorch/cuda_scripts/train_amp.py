"""A small CUDA training loop, written exactly as a CUDA user writes one.

    python train_amp.py [--steps N]

Trains a two-layer MLP on a fixed regression batch with ``.cuda()``, bfloat16 autocast, a GradScaler,
CUDA events for timing and the memory statistics, then prints ``key: value`` lines that the tests check.
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    assert torch.cuda.is_available(), "this script needs a GPU"
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    device = torch.device("cuda")

    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(128, 32).cuda()
    y = x[:, :1].clone().to(device) * 0.5 + torch.randn(128, 1, device="cuda") * 0.01

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    losses = []
    start.record()
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    end.record()
    torch.cuda.synchronize()

    print(f"device: {next(model.parameters()).device}")
    print(f"is_cuda: {x.is_cuda}")
    print(f"autocast dtype: {out.dtype}")
    print(f"first loss: {losses[0]:.6f}")
    print(f"final loss: {losses[-1]:.6f}")
    print(f"elapsed ms: {start.elapsed_time(end):.3f}")
    print(f"memory allocated: {torch.cuda.memory_allocated()}")
    print(f"max memory allocated: {torch.cuda.max_memory_allocated()}")
    print(f"device count: {torch.cuda.device_count()}")
    print(f"device name: {torch.cuda.get_device_name(0)}")


if __name__ == "__main__":
    main()
