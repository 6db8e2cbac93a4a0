"""Vendor discovery: ``DIPU_DEVICE`` names a vendor registered under the ``torch_dipu.vendors`` entry point group."""

from __future__ import annotations

from importlib.metadata import entry_points

from diopi.env import ConfigError
from torch_dipu.runtime import DeviceRuntime

BUILTIN = {"droplet": "torch_dipu.vendors.droplet:vendor"}


def available_vendors() -> dict[str, str]:
    """Vendor name -> ``module:factory`` for built-in and installed vendors."""
    found = dict(BUILTIN)
    for ep in entry_points(group="torch_dipu.vendors"):
        found[ep.name] = ep.value
    return found


def load_vendor(name: str) -> DeviceRuntime:
    """Create the runtime of vendor ``name``; an unknown or broken vendor raises an error naming it.

    An unknown name, and a vendor refusing a malformed setting of its own (droplet's ``DROPLET_FAULTS``, ...),
    are :class:`~diopi.env.ConfigError` (the user's mistake, kept as that class so ``ditorch`` reports it as one
    line instead of moving to the CPU); any other failure to load is a ``RuntimeError`` naming the vendor."""
    vendors = available_vendors()
    if name not in vendors:
        raise ConfigError(f"DIPU_DEVICE={name!r} is not a known vendor; available: {', '.join(sorted(vendors))}")
    module_name, _, attr = vendors[name].partition(":")
    try:
        module = __import__(module_name, fromlist=[attr or "vendor"])
        factory = getattr(module, attr or "vendor")
        runtime = factory()
    except ConfigError:
        raise  # its message names the variable, the value and the expected form already
    except Exception as exc:
        raise RuntimeError(f"torch_dipu vendor {name!r} ({vendors[name]}) failed to load: {exc}") from exc
    if not isinstance(runtime, DeviceRuntime):
        raise TypeError(f"torch_dipu vendor {name!r} returned {type(runtime).__name__}, not a DeviceRuntime")
    return runtime
