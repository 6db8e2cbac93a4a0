"""Streams and events of the dipu device (``torch.dipu.Stream``, ``torch.dipu.Event``).

Python vendors run kernels in issue order, so a stream is an ordering scope and an event is a
device clock reading taken when it is recorded; ``elapsed_time`` is the difference in milliseconds.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import torch

from torch_dipu import host_sync
from torch_dipu.state import get_state


def _index(device: torch.device | str | int | None) -> int:
    return get_state().device_index(device)


def _wait(index: int) -> None:
    """Let the vendor finish the work queued on ``dipu:index`` (not counted: callers count what blocks the host)."""
    state = get_state()
    state.runtime.synchronize(state.vendor_index(index))


_DIPU = int(torch._C._autograd.DeviceType.PrivateUse1)
_STREAM_IDS = itertools.count(1)  # 0 is no stream's: every Stream object has its own id


class Stream(torch.Stream):
    """A queue of work on one dipu device (``torch.dipu.Stream(device=None, priority=0)``).

    A ``torch.Stream`` (as ``torch.cuda.Stream`` is), so PyTorch's functions that take a stream accept it
    (``Tensor.record_stream``); its id, device index and device type are fixed when it is made, with no device guard.
    ``Stream(stream_id=..., device_index=..., device_type=...)`` names an existing stream.
    """

    def __new__(cls, device: torch.device | str | int | None = None, priority: int = 0, *,
                stream_id: int | None = None, device_index: int | None = None,
                device_type: int | None = None) -> Stream:
        if stream_id is None or device_index is None:
            stream_id, device_index = next(_STREAM_IDS), _index(device)
        elif device_type not in (None, _DIPU):
            raise ValueError(f"torch.dipu.Stream: device_type {device_type} is not dipu's ({_DIPU})")
        return super().__new__(cls, stream_id=stream_id, device_index=device_index, device_type=_DIPU)

    def __init__(self, device: torch.device | str | int | None = None, priority: int = 0, **_ids: int | None) -> None:
        self.priority = priority
        self._entered: list[Stream] = []

    @property
    def device(self) -> torch.device:
        return torch.device("dipu", self.device_index)

    def query(self) -> bool:
        """True: all work on this stream has finished."""
        return True

    def synchronize(self) -> None:
        """Wait on the host until all work on this stream has finished (a counted host synchronisation)."""
        host_sync.record("synchronize", self.device_index, "Stream.synchronize")
        _wait(self.device_index)

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event`` (a device-side wait: the host does not block)."""
        if event._device_index is not None:
            _wait(event._device_index)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Make later work on this stream wait for the work queued on ``stream`` (device-side)."""
        _wait(stream.device_index)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        """``with s:`` makes ``s`` the current stream of its device inside the block."""
        self._entered.append(current_stream(self.device_index))
        set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        set_stream(self._entered.pop())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, torch.Stream):
            return False
        return (other.stream_id, other.device_index, other.device_type) == (
            self.stream_id, self.device_index, self.device_type)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self) -> str:
        return f"<torch.dipu.Stream device=dipu:{self.device_index} priority={self.priority} at {id(self):#x}>"


class Event:
    """A marker in a stream; with ``enable_timing=True`` two events give the time between them."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._time_ns: int | None = None
        self._device_index: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        stream = stream or current_stream()
        state = get_state()
        vendor_index = state.vendor_index(stream.device_index)
        state.runtime.synchronize(vendor_index)
        self._device_index = stream.device_index
        self._time_ns = state.runtime.timestamp_ns(vendor_index)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Wait on the host until the work before the event has finished (a counted host synchronisation)."""
        if self._device_index is not None:
            host_sync.record("event_sync", self._device_index, "Event.synchronize")
            _wait(self._device_index)

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` wait for this event (device-side: the host does not block)."""
        if self._device_index is not None:
            _wait(self._device_index)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, timing enabled)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time needs both events created with enable_timing=True")
        if self._time_ns is None or end_event._time_ns is None:
            raise RuntimeError("elapsed_time needs both events to have been recorded")
        return (end_event._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._time_ns is not None else "unrecorded"
        return f"<torch.dipu.Event {state} timing={self.enable_timing}>"


_DEFAULT: dict[int, Stream] = {}
_CURRENT: dict[int, Stream] = {}


def default_stream(device: torch.device | str | int | None = None) -> Stream:
    index = _index(device)
    if index not in _DEFAULT:
        _DEFAULT[index] = Stream(index)
    return _DEFAULT[index]


def current_stream(device: torch.device | str | int | None = None) -> Stream:
    index = _index(device)
    return _CURRENT.get(index) or default_stream(index)


def set_stream(stream: Stream) -> None:
    _CURRENT[stream.device_index] = stream


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    previous = current_stream(s.device_index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(previous)
