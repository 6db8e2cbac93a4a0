"""Waiting for a device and timing work on it, through PyTorch's device-generic APIs.

A plugin's ``torch.<device>`` module need not have ``synchronize`` or ``Event``: ``torch.accelerator`` and
``torch.Event`` reach every device that has a C++ device guard. The device module's own functions come first
(they are what the vendor tested), the generic ones fill in what it lacks. Used by OpTimeMeasure and by
replay's timed runs.

- :func:`synchronizer`: a function that waits until the device's queued work has finished: the module's
  ``synchronize``, else :func:`accelerator_sync` (``torch.accelerator.synchronize``; where that raises, a device
  guard that cannot synchronize the whole device, stream by stream, with one line saying so). ditorch's
  ``torch.cuda.synchronize`` for a plugin without one is :func:`accelerator_sync` too.
- :func:`timing_event_factory`: a function that makes an event able to time work on the device
  (``elapsed_time``): the module's ``Event(enable_timing=True)``, else ``torch.Event(device_type,
  enable_timing=True)`` when a trial pair of them records and measures; None where there is none (the CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

from diopi.privateuse1 import accelerator_serves
from op_tools.protocol import print_line

__all__ = ["AcceleratorSync", "accelerator_sync", "synchronizer", "timing_event_factory"]


def device_module(device_type: str) -> Any:
    """``torch.<device_type>`` (the device module a plugin registered), or None (the CPU, or none)."""
    if device_type == "cpu":
        return None
    try:
        return torch.get_device_module(device_type)
    except (RuntimeError, AttributeError):
        return None


class AcceleratorSync:
    """Waits for a device through ``torch.accelerator.synchronize(index)``. Once that raised (a device guard that
    cannot synchronize the whole device), waits for the device's current stream and the ``streams`` given instead;
    :attr:`failure` keeps the guard's error, and the current device is restored if the failing guard changed it."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.failure: str | None = None

    def __call__(self, index: int | None = None, streams: Iterable[Any] = ()) -> None:
        if self.failure is None:
            current = torch.accelerator.current_device_index()
            try:
                torch.accelerator.synchronize(index)
                return
            except RuntimeError as exc:
                self.failure = " ".join(str(exc).split())
                print_line(f"torch.accelerator.synchronize() failed on {self.device_type} ({self.failure}); "
                           f"synchronizing stream by stream instead")
            if torch.accelerator.current_device_index() != current:
                torch.accelerator.set_device_index(current)
        torch.accelerator.current_stream(index).synchronize()
        for stream in streams:
            stream.synchronize()


_ACCELERATOR_SYNCS: dict[str, AcceleratorSync] = {}


def accelerator_sync(device_type: str) -> AcceleratorSync:
    """The :class:`AcceleratorSync` of ``device_type`` (one per process, so the fallback is found and said once)."""
    return _ACCELERATOR_SYNCS.setdefault(device_type, AcceleratorSync(device_type))


def synchronizer(device_type: str) -> Callable[[], None]:
    """A function that waits until the work queued on the current ``device_type`` device has finished (see the
    module's docstring); a no-op on the CPU and on a device none of the ways reaches."""
    sync = getattr(device_module(device_type), "synchronize", None)
    if sync is not None:
        return sync
    if accelerator_serves(device_type) and torch.accelerator.is_available():
        return accelerator_sync(device_type)
    return lambda: None


def timing_event_factory(device_type: str) -> Callable[[], Any] | None:
    """A function making a timing event for ``device_type`` (recorded by ``record()``, read by
    ``elapsed_time``), or None when the device has none."""
    if device_type == "cpu":
        return None
    event_class = getattr(device_module(device_type), "Event", None)
    if event_class is not None:
        return functools.partial(event_class, enable_timing=True)
    make = functools.partial(torch.Event, device_type, enable_timing=True)
    try:
        start, end = make(), make()
        start.record()
        end.record()
        end.synchronize()
        start.elapsed_time(end)
    except (RuntimeError, ValueError, TypeError):
        return None
    return make
