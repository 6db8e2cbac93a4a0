"""Fails in the reference run only (cuda mapped to the CPU): ``ditorch parity`` exits 2 naming that run."""

import torch

if torch.cuda.is_available() and torch.zeros(1, device="cuda").device.type == "cpu":
    raise RuntimeError("this script refuses to run on the CPU")
