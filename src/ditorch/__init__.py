"""ditorch: a device-independent PyTorch stack for AI chips.

``import ditorch`` (after ``import torch``) has side effects by design: it finds the vendor's PyTorch
plugin (:mod:`ditorch.detect`), imports it, and activates it, so code written for CUDA runs on that
device (:mod:`ditorch.mocking`, off with ``DITORCH_DISABLE_MOCK=1``). It prints one line to stderr,
``ditorch: <arch> <framework>:<version> pid: <pid>`` (off with ``DITORCH_QUIET=1``).

After import: ``ditorch.adapter`` is the active :class:`~ditorch.adapters.Adapter` (``None`` on the
CPU), ``ditorch.failures`` the adapters that failed on the way, ``ditorch.detection`` the whole outcome.
The command line is :mod:`ditorch.cli` (``ditorch --help``).
"""

from __future__ import annotations

__version__ = "0.1.0"

import os
import sys

from ditorch import detect
from ditorch.adapters import Adapter
from ditorch.config import DitorchConfig
from ditorch.detect import Detection, DetectionError, Failure

adapter: Adapter | None = None
failures: list[Failure] = []
detection: Detection | None = None
mocked: bool = False


def _started_as_command() -> bool:
    """Whether this process is the ``ditorch`` command (its console script, or ``python -m ditorch``)."""
    argv = getattr(sys, "orig_argv", sys.argv)
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1].partition(".")[0] == "ditorch"
    return os.path.basename(sys.argv[0]) in ("ditorch", "ditorch.exe")


def _activate() -> None:
    global adapter, failures, detection, mocked
    settings = DitorchConfig.from_env()
    try:
        detection = detect.detect(settings)
    except DetectionError as exc:
        if _started_as_command():  # the ditorch command: one line and exit status 2, no traceback
            print(f"ditorch: error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        raise DetectionError(str(exc)) from None  # one message, no traceback of ditorch's internals
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


_activate()
