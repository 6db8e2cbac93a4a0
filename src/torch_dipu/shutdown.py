"""A clean interpreter exit after ``backward()`` on dipu.

torch_dipu runs backward passes of the importing thread on that thread, but a backward pass started
from any other thread (or with autograd multithreading re-enabled) runs dipu's part on PyTorch's C++
autograd worker thread. When such a backward pass finishes, the calling thread resumes while the
worker is still releasing the graph (which frees dipu tensors and so needs the GIL). If the
interpreter is finalizing by then, CPython ends the worker thread mid-call and the C++ runtime aborts
the process ("terminate called without an active exception"). At exit, one tiny backward pass on
the worker orders it after all earlier cleanup.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path

import torch

_AUTOGRAD_THREAD_PREFIX = "pt_autograd_"


def _autograd_workers_started() -> bool:
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not tasks.is_dir():
        return True  # cannot tell: drain anyway
    for task in tasks.iterdir():
        try:
            if (task / "comm").read_text().startswith(_AUTOGRAD_THREAD_PREFIX):
                return True
        except OSError:
            continue
    return False


def drain_autograd_worker() -> None:
    """Wait until the dipu autograd worker has finished releasing every earlier backward graph."""
    if not _autograd_workers_started():
        return
    from torch_dipu import dispatch

    # The barrier's own ops are torch_dipu's, not the program's: no argument dump or auto-compare lines.
    wrappers = dict(dispatch.handler_wrappers)
    dispatch.handler_wrappers.clear()
    dispatch.clear_handlers()
    try:
        leaf = torch.zeros(1, device="dipu", requires_grad=True)
        with torch.autograd.set_multithreading_enabled(True):  # through the worker thread
            torch.autograd.grad(leaf.sum(), leaf)
        del leaf
    except Exception:  # noqa: BLE001  (best effort at exit; never mask the program's own exit status)
        pass
    finally:
        dispatch.handler_wrappers.update(wrappers)
        dispatch.clear_handlers()
    time.sleep(0.002)  # let the worker return from the barrier task itself


def register() -> None:
    atexit.register(drain_autograd_worker)
