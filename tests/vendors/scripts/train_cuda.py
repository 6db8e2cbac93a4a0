"""A small training script written for CUDA, as public training scripts are, with nothing of ditorch in it.

    python train_cuda.py OUT.json [--amp bf16] [--steps N]

Without a GPU it trains on the CPU (``device = "cuda" if torch.cuda.is_available() else "cpu"``); under
``ditorch run`` it trains on the vendor's device. Idioms: tied input/output embeddings, LayerNorm/GELU/dropout,
a pinned DataLoader with ``non_blocking`` copies, gradient accumulation, clipping, AdamW with a scheduler,
bf16 autocast, CUDA events around the loop, and a checkpoint saved mid-run and resumed into fresh objects with
``map_location=device``. Writes the losses and the final parameters as JSON.
"""

import argparse
import json
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, SEQ = 64, 32, 12


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.norm1 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * DIM, DIM))
        self.norm2 = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied weights

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos
        h = h + self.mlp(self.norm1(h))
        return self.head(self.norm2(h))


def make_objects(device: str):
    model = TinyLM().to(device)
    # eps=1e-3: with the default eps AdamW turns a gradient of +-1e-9 (the rounding noise by which two correct
    # backends differ) into a full +-lr step, so the parameters of two correct runs differ by up to 2 lr; this eps
    # keeps the update proportional to such gradients, so the comparison with the CPU measures the device
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, eps=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--amp", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)

    data = torch.randint(0, VOCAB, (64, SEQ + 1), generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=4, shuffle=False,
                                         pin_memory=torch.cuda.is_available())
    model, optimizer, scheduler = make_objects(device)
    amp = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=args.amp == "bf16")
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    losses, batches, accumulate = [], iter(loader), 2
    checkpoint = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    for step in range(args.steps):
        for _ in range(accumulate):
            (batch,) = next(batches)
            batch = batch.to(device, non_blocking=True)
            with amp:
                logits = model(batch[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), batch[:, 1:].reshape(-1)) / accumulate
            loss.backward()
            losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step == args.steps // 2:  # checkpoint, then resume into fresh objects as a restarted job would
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state()}, checkpoint)
            state = torch.load(checkpoint, map_location=device)
            model, optimizer, scheduler = make_objects(device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["rng"].cpu())  # map_location moved it to the device, as on CUDA
    elapsed = None
    if torch.cuda.is_available():
        end.record()
        torch.cuda.synchronize()
        elapsed = start.elapsed_time(end)
    params = {name: p.detach().float().cpu().flatten().tolist() for name, p in model.named_parameters()}
    result = {"device": str(next(model.parameters()).device), "tied": model.head.weight is model.embed.weight,
              "losses": losses, "params": params, "elapsed_ms": elapsed, "logits_dtype": str(logits.dtype)}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
