"""dicl's bookkeeping per process group: call numbers, the transport works it keeps, and what it says when a
collective cannot complete.

**Saying who and what.** When a collective fails, the rank that sees it prints one line on stderr at once and
raises :class:`DiclError` with the same text, naming the collective, its call number in the group, the rank,
and what the other ranks did, e.g.::

    dicl all_reduce failed on rank 0 of 2: rank 1 did not call it within the group's timeout (0:00:05)
    (call 7 on group 0; transport: Timed out waiting 5000ms for send operation to complete)

What the other ranks did comes from the group's store, written only off the fast path:

1. arrival marks: a rank whose collective has not completed after ``patience`` (half a second, or a quarter of
   the group's timeout if that is shorter) writes that it waits in call k; it deletes the mark when the call
   completes. A peer without a mark has not called the collective (or was faster than the patience).
2. exit notes: at interpreter exit (atexit, before the transport's connections close) each rank writes how its
   program ended: normally, or with the exception that ended it. A peer with a note *ended*; a peer whose
   connection closed without a note was killed or crashed.
3. the transport's error: a timeout (someone never came) or a closed connection (someone's process ended).

**Ending cleanly under a launcher.** Once one process of a torchrun job fails, torchrun ends the others with
SIGTERM, which kills a Python process at once. So that the surviving ranks still say which collective they were
in, a rank that waits longer than ``patience`` (or whose wait failed) holds SIGTERM back until its line is printed,
then lets it end the process as usual. This applies to the main thread, and only when the program has no SIGTERM
handler of its own (that one, if any, runs between two waits of half a second).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import datetime
import re
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

#: How long a wait lasts before the rank marks its arrival and starts watching for SIGTERM (capped by a quarter of
#: the group's timeout).
PATIENCE = 0.5
#: Waits after the first one are this long, so that SIGTERM is noticed in time.
SLICE = 0.5
#: Groups destroyed while the process runs: their last works are kept this many groups long (see
#: :meth:`GroupState.keep`).
_RETIRED: collections.deque[list[Any]] = collections.deque(maxlen=16)


class DiclError(RuntimeError):
    """A collective failed: mismatched calls across ranks, or a transport failure (a peer that stopped or never
    came), named with the rank and the collective."""


DiclError.__module__ = "torch_dipu.dicl"  # its public home (tracebacks print torch_dipu.dicl.DiclError)


@dataclass(eq=False)
class GroupState:
    """What dicl keeps about one process group in this process."""

    rank: int
    size: int
    name: str
    store: Any
    timeout: datetime.timedelta | None
    global_ranks: list[int]
    #: Collectives dicl ran on this group so far; the same count on every rank of a correct program.
    calls: int = 0
    #: The transport works of the latest call (see :meth:`keep`).
    works: list[Any] = field(default_factory=list)

    @property
    def patience(self) -> datetime.timedelta:
        limit = PATIENCE if self.timeout is None else min(PATIENCE, self.timeout.total_seconds() / 4)
        return datetime.timedelta(seconds=limit)

    def keep(self, works: list[Any]) -> None:
        """Keep the transport works of the call that just ended, and let those of the call before go.

        A transport work holds Python objects (dipu's storage tensors are Python-made), so whoever drops the last
        reference to it takes the GIL. The transport's worker thread drops its own reference to a work after it
        completes it, and it must never be the last one: at exit it would wait for the GIL held by the thread that
        destroys the group (from the DDP reducer's deallocation) and joins that worker
        (``torch_dipu.dicl._no_python_objects_in_tls`` tells the whole story). The default transport runs one worker
        per group, which finishes a work before it takes the next; so when a call's works have completed, those of
        the call before are released by nobody but this thread, and at exit dicl keeps the last ones for good
        (:func:`_keep_works_for_good`).
        """
        self.works = works


_STATES: weakref.WeakKeyDictionary[Any, GroupState] = weakref.WeakKeyDictionary()
_EXIT_HOOKS: list[bool] = []


def group_state(pg: Any) -> GroupState:
    """The :class:`GroupState` of ProcessGroup ``pg`` (made on its first collective)."""
    state = _STATES.get(pg)
    if state is None:
        state = _STATES[pg] = _new_state(pg)
        weakref.finalize(pg, _retire, state).atexit = False
        if not _EXIT_HOOKS:
            _EXIT_HOOKS.append(True)
            atexit.register(_note_exit)
            atexit.register(_keep_works_for_good)
    return state


def _retire(state: GroupState) -> None:
    """A destroyed group's last works stay a while longer: its worker may not have let go of them yet, and the
    group's C++ object may be destroyed later, with the GIL held (see :meth:`GroupState.keep`)."""
    _RETIRED.append(state.works)


def _new_state(pg: Any) -> GroupState:
    world = dist.distributed_c10d._world
    store = world.pg_map.get(pg, (None, None))[1]
    try:
        timeout = pg._get_backend(torch.device("dipu")).options._timeout
    except (RuntimeError, AttributeError):
        timeout = None
    try:
        ranks = dist.get_process_group_ranks(pg)
    except (RuntimeError, ValueError, KeyError):
        ranks = list(range(pg.size()))
    return GroupState(pg.rank(), pg.size(), pg.group_name, store, timeout, ranks)


# ---- exit: every rank notes how it ended; the last works stay until the process is gone ----

def _default_store() -> Any:
    return dist.distributed_c10d._get_default_store() if dist.is_initialized() else None


def _exit_key(global_rank: int) -> str:
    return f"dicl/exit/rank{global_rank}"


def _note_exit() -> None:
    """How this process's program ended, for the ranks that wait for it (atexit)."""
    try:
        store = _default_store()
        if store is None:
            return
        exc = getattr(sys, "last_value", None)  # set when the interpreter printed an uncaught exception
        if exc is None:
            text = "its program ended without an error"
        else:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        store.set(_exit_key(dist.get_rank()), text)
    except Exception:  # noqa: BLE001  (best effort at exit; never change the program's exit status)
        pass


def _keep_works_for_good() -> None:
    """Never release the works dicl still keeps: the interpreter's teardown may destroy a group (with the GIL held,
    from the DDP reducer) while its worker still holds one of them (see :meth:`GroupState.keep`)."""
    for works in [*(state.works for state in list(_STATES.values())), *_RETIRED]:
        for work in works:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(work))


# ---- waiting: the fast path is one wait; past the patience the rank marks its arrival and watches SIGTERM ----

class _HeldSigterm:
    """Hold SIGTERM back (main thread, no handler of the program's own) until the block ends, then deliver it."""

    def __enter__(self) -> _HeldSigterm:
        self.caught = False
        self.previous = None
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is \
                signal.SIG_DFL:
            self.previous = signal.signal(signal.SIGTERM, self._catch)
        return self

    def _catch(self, signum: int, frame: Any) -> None:
        self.caught = True

    def __exit__(self, *exc_info: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            if self.caught:
                signal.raise_signal(signal.SIGTERM)


class _Terminated(Exception):
    """SIGTERM arrived while the rank waited."""


def arrival_key(call: int, rank: int) -> str:
    """The store key (in the group's store) by which group rank ``rank`` marks that it waits in call ``call``."""
    return f"dicl/call{call}/rank{rank}"


def wait(work: Any, state: GroupState, call: int | None, name: str) -> None:
    """Wait for transport work ``work`` of call number ``call`` (collective ``name``); a failure raises
    :class:`DiclError` naming the rank, the collective and what the other ranks did, and prints it on stderr.
    ``call=None`` (point-to-point works: not numbered, since only two ranks take part, and gloo cannot wait on
    them in parts): one plain wait."""
    if call is None:
        try:
            work.wait()
        except RuntimeError as exc:
            _fail(state, call, name, exc, arrived=False)
        return
    try:
        work.wait(state.patience)
        return
    except RuntimeError:
        pass
    if work.is_completed():  # it failed (or completed just as the timed wait gave up)
        error = _settle(work)
        if error is not None:
            _fail(state, call, name, error, arrived=False)
        return
    with _HeldSigterm() as held:
        marked = _mark_arrival(state, call)
        while not held.caught:
            try:
                work.wait(datetime.timedelta(seconds=SLICE))
                break
            except RuntimeError:
                if work.is_completed():
                    error = _settle(work)
                    if error is None:
                        break
                    _fail(state, call, name, error, arrived=True)  # the mark stays: peers failing later read it
        else:
            _fail(state, call, name, _Terminated(), arrived=True)
    if marked:
        _unmark_arrival(state, call)


def _settle(work: Any) -> RuntimeError | None:
    """A completed work's own outcome (a timed wait may have given up just as it completed): its error or None."""
    try:
        work.wait()
    except RuntimeError as exc:
        return exc
    return None


def _mark_arrival(state: GroupState, call: int | None) -> bool:
    if state.store is None or call is None:
        return False
    try:
        state.store.set(arrival_key(call, state.rank), f"{time.time():.3f}")
        return True
    except Exception:  # noqa: BLE001  (the report is best effort; the collective's own outcome is what counts)
        return False


def _unmark_arrival(state: GroupState, call: int) -> None:
    with contextlib.suppress(Exception):
        state.store.delete_key(arrival_key(call, state.rank))


def _fail(state: GroupState, call: int | None, name: str, exc: BaseException, arrived: bool) -> None:
    """Print and raise the :class:`DiclError` of a failed wait (SIGTERM held back until the line is out)."""
    with _HeldSigterm():
        if not arrived:
            _mark_arrival(state, call)  # peers that fail a moment later see this rank was there
        message = describe_failure(state, call, name, exc)
        print(message, file=sys.stderr, flush=True)
    raise DiclError(message) from (None if isinstance(exc, _Terminated) else exc)


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def _peers(state: GroupState, call: int | None) -> tuple[set[int], dict[int, str]]:
    """The group ranks that marked their arrival in ``call`` (all of them when ``call`` is None: unknown), and
    the exit notes of the group's ranks."""
    arrived: set[int] = set()
    notes: dict[int, str] = {}
    default = _default_store()
    for r in range(state.size):
        if r == state.rank:
            continue
        if call is None or (state.store is not None and state.store.check([arrival_key(call, r)])):
            arrived.add(r)
        key = _exit_key(state.global_ranks[r])
        if default is not None and default.check([key]):
            notes[r] = default.get(key).decode(errors="replace")
    return arrived, notes


def _transport_text(exc: BaseException) -> str:
    """The transport's message, short: without gloo's source location and advice, on one line."""
    text = re.sub(r"\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*", "", " ".join(str(exc).split()))
    first, dot, _ = text.partition(". ")
    return (first + dot.strip())[:300]


def describe_failure(state: GroupState, call: int | None, name: str, exc: BaseException) -> str:
    """The one-line diagnosis of collective ``name`` (call number ``call``; None: point-to-point) failing with
    ``exc`` on this rank."""
    rank, size = state.rank, state.size
    terminated = isinstance(exc, _Terminated)
    text = "" if terminated else _transport_text(exc)
    timed_out = "timed out" in text.lower()
    closed = any(word in text.lower() for word in ("closed", "reset", "broken pipe"))
    try:
        arrived, notes = _peers(state, call)
        unknown = ""
    except Exception as store_error:  # noqa: BLE001  (e.g. the store's host was the rank that stopped)
        arrived, notes = set(range(size)), {}
        first = (str(store_error).strip().splitlines() or [""])[0]
        peers = [r for r in range(size) if r != rank]
        unknown = f"{_ranks_text(peers)} did not complete it (the group's store could not be read: {first})"
    parts = []
    for r, note in sorted(notes.items()):
        parts.append(f"rank {r} {'ended while in it' if r in arrived else 'ended before calling it'} ({note})")
    missing = [r for r in range(size) if r != rank and r not in arrived and r not in notes]
    if missing and timed_out:
        timeout = f" ({state.timeout})" if state.timeout is not None else ""
        parts.append(f"{_ranks_text(missing)} did not call it within the group's timeout{timeout}")
    elif missing and closed and len(missing) == 1:
        parts.append(f"rank {missing[0]} had not called it and its process stopped without an exit note (killed, or "
                     f"crashed)")
    elif missing:
        parts.append(f"{_ranks_text(missing)} had not called it")
    elif not parts and not unknown:
        who = "every rank called it" if call is not None else "the peer did not complete it"
        parts.append(who + (", then a connection closed: a process stopped during it" if closed else ""))
    if unknown:
        parts.append(unknown)
    group = f"call {call} on group {state.name}" if call is not None else f"group {state.name}"
    if terminated:
        head = f"dicl {name} on rank {rank} of {size} was ended by SIGTERM (the launcher stops the job) while it waited"
        return f"{head}: {'; '.join(parts)} ({group})"
    return f"dicl {name} failed on rank {rank} of {size}: {'; '.join(parts)} ({group}; transport: {text})"
