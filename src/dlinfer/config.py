"""Every environment variable dlinfer reads, in one place (documented in docs/environment.md), parsed once when
the first dlinfer operator runs (:func:`dlinfer_config`), never per call.

- ``DLINFER_KERNELS``: ``vendor`` (default: a vendor kernel where one is registered for the tensors' device,
  else the reference) or ``reference`` (always the plain-torch reference kernels, e.g. to rule a vendor kernel
  out while debugging).
- ``DLINFER_LINEAR_USE_NN_LAYOUT``: ``1`` when the framework stores ``linear``'s weights ``(in, out)`` (LMDeploy
  transposes them under the same variable); default ``0``, weights ``(out, in)``.

A malformed value raises ``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

from diopi.env import ConfigError

__all__ = ["DlinferConfig", "dlinfer_config", "parse_config", "reset_config"]

_KERNEL_CHOICES = ("vendor", "reference")


@dataclass(frozen=True)
class DlinferConfig:
    kernels: str = "vendor"
    linear_nn_layout: bool = False


def parse_config(env: Mapping[str, str] | None = None) -> DlinferConfig:
    """The configuration from ``env`` (default: ``os.environ``)."""
    env = os.environ if env is None else env
    kernels = env.get("DLINFER_KERNELS", "").strip().lower() or "vendor"
    if kernels not in _KERNEL_CHOICES:
        raise ConfigError(
            f"DLINFER_KERNELS={env.get('DLINFER_KERNELS')!r}: expected one of {', '.join(_KERNEL_CHOICES)}")
    layout = env.get("DLINFER_LINEAR_USE_NN_LAYOUT", "").strip() or "0"
    if layout not in ("0", "1"):
        raise ConfigError(f"DLINFER_LINEAR_USE_NN_LAYOUT={layout!r}: expected 0 or 1")
    return DlinferConfig(kernels=kernels, linear_nn_layout=layout == "1")


@functools.cache
def dlinfer_config() -> DlinferConfig:
    """The process's configuration, parsed on first use."""
    return parse_config()


def reset_config() -> None:
    """Forget the parsed configuration (tests; the next :func:`dlinfer_config` reads the environment again)."""
    dlinfer_config.cache_clear()
