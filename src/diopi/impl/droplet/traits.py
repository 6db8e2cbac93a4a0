"""droplet's traits: the switches that make the simulated chip behave like a real one, read from the
``DROPLET_*`` environment variables (the one place they are read, ``DROPLET_FAULTS`` included).

The kernels (:mod:`diopi.impl.droplet.impl`) use ``unsupported_dtypes`` and ``matmul_precision``; torch_dipu's
droplet runtime uses ``device_count``, ``memory_capacity`` and ``malloc_latency_us`` too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from diopi.case_format import CaseFormatError, dtype_from_name
from diopi.env import ConfigError, split_list
from diopi.impl.droplet.faults import Fault, parse_faults

__all__ = ["MATMUL_PRECISIONS", "DropletTraits", "faults_from_env", "parse_dtype", "parse_dtypes", "parse_size"]

MATMUL_PRECISIONS = ("highest", "high", "medium")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, source: str = "DROPLET_MEMORY_CAPACITY") -> int:
    """``"16GiB"``, ``"512M"``, ``"1024"`` -> bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"{source}={text!r} is not a size (examples: 16GiB, 512MiB, 1048576)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "")[:1].upper()])


def parse_dtype(name: str, source: str = "DROPLET_UNSUPPORTED_DTYPES") -> torch.dtype:
    """``"float64"`` / ``"torch.float64"`` -> ``torch.float64``; anything else raises naming ``source``."""
    try:
        return dtype_from_name(name.strip().removeprefix("torch."))
    except CaseFormatError:
        raise ConfigError(f"{source}: {name!r} is not a torch dtype (examples: float64, bfloat16)") from None


def parse_dtypes(value: str | Iterable[torch.dtype | str], source: str = "DROPLET_UNSUPPORTED_DTYPES",
                 ) -> frozenset[torch.dtype]:
    """A comma-separated list of dtype names, or an iterable of dtypes and names, as a set of dtypes."""
    items = split_list(value) if isinstance(value, str) else list(value)
    return frozenset(d if isinstance(d, torch.dtype) else parse_dtype(d, source) for d in items)


@dataclass
class DropletTraits:
    """Switches of the droplet device; defaults describe one 16 GiB card (ask for more with
    ``DROPLET_DEVICE_COUNT``)."""

    device_count: int = 1
    memory_capacity: int = 16 << 30
    unsupported_dtypes: frozenset[torch.dtype] = field(default_factory=frozenset)
    matmul_precision: str = "highest"
    #: ``DROPLET_MALLOC_LATENCY_US``: microseconds each raw device malloc and free takes (busy wait), as a real
    #: driver's cudaMalloc/cudaFree do; shows what torch_dipu's caching allocator saves.
    malloc_latency_us: float = 0.0

    def validate(self) -> None:
        if self.device_count < 0:
            raise ConfigError(f"droplet device_count must be >= 0, got {self.device_count}")
        if self.memory_capacity < 0:
            raise ConfigError(f"droplet memory_capacity must be >= 0, got {self.memory_capacity}")
        if not self.malloc_latency_us >= 0:
            raise ConfigError(f"droplet malloc_latency_us must be >= 0, got {self.malloc_latency_us}")
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ConfigError(
                f"droplet matmul_precision {self.matmul_precision!r} is not one of {', '.join(MATMUL_PRECISIONS)}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DropletTraits:
        """The traits ``DROPLET_DEVICE_COUNT``, ``DROPLET_MEMORY_CAPACITY``, ``DROPLET_UNSUPPORTED_DTYPES``,
        ``DROPLET_MATMUL_PRECISION`` and ``DROPLET_MALLOC_LATENCY_US`` ask for (``env`` defaults to ``os.environ``)."""
        env = os.environ if env is None else env
        traits = cls()
        if env.get("DROPLET_DEVICE_COUNT"):
            try:
                traits.device_count = int(env["DROPLET_DEVICE_COUNT"])
            except ValueError:
                raise ConfigError(f"DROPLET_DEVICE_COUNT={env['DROPLET_DEVICE_COUNT']!r} is not an integer") from None
        if env.get("DROPLET_MEMORY_CAPACITY"):
            traits.memory_capacity = parse_size(env["DROPLET_MEMORY_CAPACITY"])
        if env.get("DROPLET_UNSUPPORTED_DTYPES"):
            traits.unsupported_dtypes = parse_dtypes(env["DROPLET_UNSUPPORTED_DTYPES"])
        if env.get("DROPLET_MATMUL_PRECISION"):
            traits.matmul_precision = env["DROPLET_MATMUL_PRECISION"].strip().lower()
            if traits.matmul_precision not in MATMUL_PRECISIONS:
                raise ConfigError(f"DROPLET_MATMUL_PRECISION={env['DROPLET_MATMUL_PRECISION']!r}: expected one of "
                                  f"{', '.join(MATMUL_PRECISIONS)}")
        if env.get("DROPLET_MALLOC_LATENCY_US", "").strip():
            try:
                traits.malloc_latency_us = float(env["DROPLET_MALLOC_LATENCY_US"])
            except ValueError:
                raise ConfigError(f"DROPLET_MALLOC_LATENCY_US={env['DROPLET_MALLOC_LATENCY_US']!r} is not a number "
                                 "of microseconds") from None
        traits.validate()
        return traits


def faults_from_env(env: Mapping[str, str] | None = None) -> list[Fault]:
    """The faults ``DROPLET_FAULTS`` asks for (``env`` defaults to ``os.environ``); grammar in
    :mod:`diopi.impl.droplet.faults`."""
    return parse_faults((os.environ if env is None else env).get("DROPLET_FAULTS", ""))
