"""A small training run for rehearsing the wrong-loss workflow of docs/vendor_bringup.md on droplet.

``python examples/debug_wrong_loss.py --device dipu`` trains a tiny MLP for a few steps and prints one loss per
line; ``--device cpu`` gives the reference. Inject a kernel bug with ``DROPLET_FAULTS`` and find it with
conformance, ``DIPU_AUTOCOMPARE_OPS_LIST``, ``DIPU_DUMP_OP_ARGS`` and ``DIPU_FORCE_FALLBACK_OPS_LIST``: the
program never changes.
"""

from __future__ import annotations

import argparse

import torch


def train(device: str, steps: int) -> list[float]:
    """Losses of ``steps`` SGD steps of a seeded 2-layer MLP regression on ``device``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    x = torch.randn(32, 8)
    y = x[:, :3].sum(1, keepdim=True)
    model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="dipu", help="dipu (default) or cpu")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    if args.device.startswith("dipu"):
        import torch_dipu  # noqa: F401  (registers the device)
    for step, loss in enumerate(train(args.device, args.steps)):
        print(f"step {step} loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
