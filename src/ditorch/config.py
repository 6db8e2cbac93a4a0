"""Every environment variable ditorch reads, in one place (``DITORCH_*``, and ``CUDA_VISIBLE_DEVICES``).

===========================  ==========  ============================================================
variable                     default     meaning
===========================  ==========  ============================================================
DITORCH_VENDOR               (detect)    adapter to use (``npu``, ``mlu``, ``musa``, ``biren``, ``cuda``,
                                         ``xpu``, ``mps``, ``dipu``, or ``cpu``), the device type of the plugin
                                         holding PrivateUse1, or a plugin package; skips detection
DITORCH_QUIET                0           1: no ``ditorch: <arch> <framework>:<version> pid: <pid>`` line
DITORCH_DISABLE_MOCK         0           1: do not map ``torch.cuda`` / ``"cuda"`` / ``nccl`` to the vendor
DITORCH_SHOW_DEVICE_AS_CUDA  0           1: ``tensor.device`` reads as cuda (costs a wrapper per access)
DITORCH_DTYPE_CAST           (unset)     dtype the device lacks: unset/``0`` raise; ``1`` cast float64->float32
                                         (one warning per call site); or ``float64:float32,...`` pairs
DITORCH_DEBUG                0           1: the ``ditorch`` command prints the traceback of a user error too
                                         (by default one line, ``ditorch <command>: error: ...``, exit status 2)
CUDA_VISIBLE_DEVICES         (unset)     with mocking on, copied into the vendor plugin's own variable
                                         (``Adapter.visible_devices_env``, e.g. ``DIPU_VISIBLE_DEVICES``)
                                         before the plugin is imported, unless that one is set (it wins)
===========================  ==========  ============================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from diopi.env import env_flag

PREFIX = "DITORCH_"

#: Known switches and their one-line descriptions (``ditorch info`` prints the ones in force).
SWITCHES: dict[str, str] = {
    "DITORCH_VENDOR": "adapter chosen by name instead of detection",
    "DITORCH_QUIET": "no banner line on import",
    "DITORCH_DISABLE_MOCK": "torch.cuda / 'cuda' / nccl are not mapped to the vendor",
    "DITORCH_SHOW_DEVICE_AS_CUDA": "tensor.device reads as cuda",
    "DITORCH_DTYPE_CAST": "cast dtypes the device lacks instead of raising",
    "DITORCH_DEBUG": "the ditorch command shows the traceback of a user error too",
    "DITORCH_STRICT": "an op-list entry that names no operator is an error, not a warning (diopi.op_names)",
}


@dataclass(frozen=True)
class DitorchConfig:
    """ditorch's settings; :meth:`from_env` reads them from ``DITORCH_*`` variables."""

    vendor: str | None = None
    quiet: bool = False
    disable_mock: bool = False
    show_device_as_cuda: bool = False
    dtype_cast: str | None = None  # raw text; ditorch.mocking parses it (mocking.switches.parse_dtype_cast)
    cuda_visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as given (ditorch.detect passes it on)
    debug: bool = False  # DITORCH_DEBUG: the command line's user errors come with their traceback

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DitorchConfig:
        env = os.environ if env is None else env
        vendor = (env.get("DITORCH_VENDOR") or "").strip().lower() or None
        return cls(
            vendor=vendor,
            quiet=env_flag("DITORCH_QUIET", env=env),
            disable_mock=env_flag("DITORCH_DISABLE_MOCK", env=env),
            show_device_as_cuda=env_flag("DITORCH_SHOW_DEVICE_AS_CUDA", env=env),
            dtype_cast=env.get("DITORCH_DTYPE_CAST"),
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            debug=env_flag("DITORCH_DEBUG", env=env),
        )


def switches_in_force(env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """Every ``DITORCH_*`` variable set in ``env``: (name, value, description); unknown names say so."""
    env = os.environ if env is None else env
    return [
        (name, env[name], SWITCHES.get(name, "unknown: ditorch does not read this variable"))
        for name in sorted(env)
        if name.startswith(PREFIX)
    ]
