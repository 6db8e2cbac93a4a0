"""Statistics of host tensors reduced on a background thread while the caller's step goes on.

:func:`submit` takes a copy of the tensor now (its values at the call, whatever happens to it later) and queues
it; one daemon thread reduces the copies with the CPU kernel of ``diopi::tensor_stats``
(:func:`op_tools.tensor_stats.tensor_stats`), so the figures are the very ones an inline reduction gives.
:func:`wait` returns once every queued tensor is reduced and its dict filled (it raises the first error the
thread met). At most :data:`MAX_WAITING_BYTES` of copies wait: past that, :func:`submit` reduces at once on the
caller's thread, so memory stays bounded.

The thread pays off where the caller's own thread is the bottleneck (Python hooks around small operators on a
CPU with a core to spare); torch's reductions release the GIL, so the two threads overlap.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import torch

from op_tools.tensor_stats import tensor_stats

__all__ = ["MAX_WAITING_BYTES", "submit", "wait"]

#: Bytes of tensor copies that may wait for the thread before :func:`submit` reduces inline.
MAX_WAITING_BYTES = 256 << 20

_queue: queue.SimpleQueue[tuple[torch.Tensor, dict[str, Any]]] = queue.SimpleQueue()
_done = threading.Condition()
_waiting_bytes = 0
_waiting = 0
_error: BaseException | None = None
_thread: threading.Thread | None = None


def _work() -> None:
    global _waiting, _waiting_bytes, _error
    while True:
        copy, target = _queue.get()
        try:
            target.update(tensor_stats(copy))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller at wait()
            with _done:
                _error = _error or exc
        with _done:
            _waiting -= 1
            _waiting_bytes -= copy.nbytes
            if not _waiting:
                _done.notify_all()


def submit(t: torch.Tensor, target: dict[str, Any]) -> None:
    """Fill ``target`` with the statistics of host tensor ``t`` as it is now (by :func:`wait`)."""
    global _waiting, _waiting_bytes, _thread
    nbytes = t.nbytes
    if _waiting_bytes + nbytes > MAX_WAITING_BYTES:
        target.update(tensor_stats(t))
        return
    copy = t.detach().clone()
    with _done:
        _waiting += 1
        _waiting_bytes += nbytes
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_work, name="op_tools-host-stats", daemon=True)
            _thread.start()
    _queue.put((copy, target))


def wait() -> None:
    """Return once every submitted tensor is reduced; raise the first error the thread met, once."""
    global _error
    with _done:
        while _waiting:
            _done.wait()
        error, _error = _error, None
    if error is not None:
        raise error
