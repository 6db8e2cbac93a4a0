"""droplet: the reference vendor, a simulated accelerator whose memory lives in host RAM.

Kernels are droplet's DIOPI implementation (:mod:`diopi.impl.droplet`: the reference kernels with traits and
faults, the same ones ``ditorch conformance run --impl droplet`` calls). Switches (environment or Python) make it behave
like a real chip: unsupported dtypes, lower-precision float32 matmul, a memory capacity, a device
count (1 unless asked for more), and injected faults. See docs/droplet.md.

Python switches::

    from torch_dipu.vendors import droplet
    droplet.configure(faults="mm:bias:0.5", matmul_precision="medium")
    with droplet.switches(faults="add.Tensor:nan"):
        ...
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from diopi.impl.droplet import DEFAULT_PARAMS, DropletTraits, Fault, faults_from_env, parse_faults, parse_size
from torch_dipu.vendors.droplet.runtime import DropletRuntime

__all__ = ["DEFAULT_PARAMS", "DropletRuntime", "DropletTraits", "Fault", "configure", "parse_faults",
           "parse_size", "runtime", "switches", "vendor"]


def vendor() -> DropletRuntime:
    """Entry point ``torch_dipu.vendors:droplet``: a runtime configured from the environment."""
    return DropletRuntime(DropletTraits.from_env(), faults_from_env())


def runtime() -> DropletRuntime:
    """The active droplet runtime (torch_dipu must be imported with DIPU_DEVICE=droplet)."""
    from torch_dipu.state import get_state

    active = get_state().runtime
    if not isinstance(active, DropletRuntime):
        raise RuntimeError(f"the active dipu vendor is {active.name!r}, not droplet")
    return active


def configure(**changes: Any) -> None:
    """Change droplet switches: ``faults`` (str or list of Fault), ``unsupported_dtypes``,
    ``matmul_precision``, ``memory_capacity`` (bytes or "16GiB"), ``device_count``, ``malloc_latency_us``."""
    if isinstance(changes.get("memory_capacity"), str):
        changes["memory_capacity"] = parse_size(changes["memory_capacity"])
    from torch_dipu.state import get_state, resolve_visible

    rt = runtime()
    if "device_count" in changes:  # a count that DIPU_VISIBLE_DEVICES no longer fits changes nothing
        config = get_state().config
        resolve_visible(config.visible_devices, changes["device_count"], rt.name, config.visible_devices_text)
    rt.reconfigure(**changes)  # torch_dipu re-reads device count and capacities (a config-change listener)


@contextlib.contextmanager
def switches(**changes: Any) -> Iterator[DropletRuntime]:
    """Apply droplet switches inside a ``with`` block and restore the previous ones after it."""
    rt = runtime()
    saved_traits, saved_faults = copy.copy(rt.traits), list(rt.faults)
    configure(**changes)
    try:
        yield rt
    finally:
        configure(
            faults=saved_faults,
            device_count=saved_traits.device_count,
            memory_capacity=saved_traits.memory_capacity,
            unsupported_dtypes=saved_traits.unsupported_dtypes,
            matmul_precision=saved_traits.matmul_precision,
            malloc_latency_us=saved_traits.malloc_latency_us,
        )
