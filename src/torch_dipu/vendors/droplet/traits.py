"""droplet's traits: the switches that make the simulated chip behave like a real one."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import torch

MATMUL_PRECISIONS = ("highest", "high", "medium")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, source: str = "DROPLET_MEMORY_CAPACITY") -> int:
    """``"16GiB"``, ``"512M"``, ``"1024"`` -> bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"{source}={text!r} is not a size (examples: 16GiB, 512MiB, 1048576)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "")[:1].upper()])


def parse_dtype(name: str, source: str = "DROPLET_UNSUPPORTED_DTYPES") -> torch.dtype:
    dtype = getattr(torch, name.strip().removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{source}: {name!r} is not a torch dtype (examples: float64, bfloat16)")
    return dtype


@dataclass
class DropletTraits:
    """Switches of the droplet device; defaults describe one 16 GiB card (ask for more with
    ``DROPLET_DEVICE_COUNT``)."""

    device_count: int = 1
    memory_capacity: int = 16 << 30
    unsupported_dtypes: frozenset[torch.dtype] = field(default_factory=frozenset)
    matmul_precision: str = "highest"

    def validate(self) -> None:
        if self.device_count < 0:
            raise ValueError(f"droplet device_count must be >= 0, got {self.device_count}")
        if self.memory_capacity < 0:
            raise ValueError(f"droplet memory_capacity must be >= 0, got {self.memory_capacity}")
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(
                f"droplet matmul_precision {self.matmul_precision!r} is not one of {', '.join(MATMUL_PRECISIONS)}"
            )

    @classmethod
    def from_env(cls) -> DropletTraits:
        env = os.environ
        traits = cls()
        if env.get("DROPLET_DEVICE_COUNT"):
            try:
                traits.device_count = int(env["DROPLET_DEVICE_COUNT"])
            except ValueError:
                raise ValueError(f"DROPLET_DEVICE_COUNT={env['DROPLET_DEVICE_COUNT']!r} is not an integer") from None
        if env.get("DROPLET_MEMORY_CAPACITY"):
            traits.memory_capacity = parse_size(env["DROPLET_MEMORY_CAPACITY"])
        if env.get("DROPLET_UNSUPPORTED_DTYPES"):
            names = [n for n in env["DROPLET_UNSUPPORTED_DTYPES"].split(",") if n.strip()]
            traits.unsupported_dtypes = frozenset(parse_dtype(n) for n in names)
        if env.get("DROPLET_MATMUL_PRECISION"):
            traits.matmul_precision = env["DROPLET_MATMUL_PRECISION"].strip().lower()
        traits.validate()
        return traits
