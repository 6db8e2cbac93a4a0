"""ditorch: a device-independent PyTorch stack for AI chips.

``import ditorch`` (after ``import torch``) has side effects by design: it finds the vendor's PyTorch
plugin (:mod:`ditorch.detect`), imports it, and activates it, so code written for CUDA runs on that
device (:mod:`ditorch.mocking`, off with ``DITORCH_DISABLE_MOCK=1``). It prints one line to stderr,
``ditorch: <arch> <framework>:<version> pid: <pid>`` (off with ``DITORCH_QUIET=1``).

After import: ``ditorch.adapter`` is the active :class:`~ditorch.adapters.Adapter` (``None`` on the
CPU), ``ditorch.failures`` the adapters that failed on the way, ``ditorch.detection`` the whole outcome.
The command line is :mod:`ditorch.cli` (``ditorch --help``). In the ``ditorch`` command itself the
activation waits until the command line has been read (:func:`activate`, called by :func:`ditorch.cli.main`):
``ditorch --help`` and a malformed option answer without importing torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ditorch.adapters import Adapter
    from ditorch.detect import Detection, Failure

adapter: Adapter | None = None
failures: list[Failure] = []
detection: Detection | None = None
mocked: bool = False
_activated = False

#: Names this package exports from its submodules, imported on first use (``ditorch.DetectionError``, ...).
_LAZY = {"Adapter": "ditorch.adapters", "DitorchConfig": "ditorch.config", "Detection": "ditorch.detect",
         "DetectionError": "ditorch.detect", "Failure": "ditorch.detect"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ditorch' has no attribute {name!r}")


def _started_as_command(exact: bool = False) -> bool:
    """Whether this process is the ``ditorch`` command (its console script, or ``python -m ditorch``; unless
    ``exact``, also ``python -m ditorch.<module>``)."""
    argv = getattr(sys, "orig_argv", sys.argv)
    if "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        return module == "ditorch" if exact else module.partition(".")[0] == "ditorch"
    return os.path.basename(sys.argv[0]) in ("ditorch", "ditorch.exe")


def _command_line_activates() -> bool:
    """Whether this process is the ``ditorch`` command line itself (the console script, ``python -m ditorch``),
    which activates ditorch once it has read its arguments (:func:`activate`). A worker process the command
    starts through multiprocessing (``conformance run --workers N``) activates on import, as any process does."""
    from multiprocessing import parent_process

    return parent_process() is None and _started_as_command(exact=True)


def activate() -> None:
    """Detect the vendor's plugin, import and activate it (once per process; ``import ditorch`` calls this,
    except in the ``ditorch`` command, which calls it after reading its command line)."""
    global _activated
    if _activated:
        return
    _activated = True
    _activate()


def _activate() -> None:
    global adapter, failures, detection, mocked
    from diopi.env import ConfigError
    from ditorch import detect
    from ditorch.config import DitorchConfig
    from ditorch.detect import DetectionError

    try:
        settings = DitorchConfig.from_env()
        detection = detect.detect(settings)
    except ConfigError as exc:
        if _started_as_command() and not _command_line_activates():  # a ditorch child (python -m ditorch.x)
            print(f"ditorch: error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        if isinstance(exc, DetectionError):
            raise DetectionError(str(exc)) from None  # one message, no traceback of ditorch's internals
        raise
    adapter, failures = detection.adapter, detection.failures
    detect.report(detection)
    native_cuda = adapter is not None and adapter.is_native and adapter.device_type == "cuda"
    wants_mock = adapter is not None and not native_cuda and not settings.disable_mock
    if wants_mock:
        from ditorch import mocking

        mocking.install(adapter)
        mocked = True
    if adapter is not None and not adapter.is_native:
        from diopi import compile_default

        compile_default.install()  # torch.compile's default backend: inductor has no code generator for plugins
    if not settings.quiet:
        print(detect.banner(adapter, os.getpid()), file=sys.stderr, flush=True)


if not _command_line_activates():
    activate()
