"""A background thread that writes captured cases, with a bounded queue.

The training thread hands over jobs (closures doing file I/O on host copies) with their size in bytes.
When the queued bytes would pass the bound, :meth:`CaseWriter.submit` waits: nothing is dropped. The
first I/O error (disk full, folder not writable) stops the writer: it prints one warning, and later jobs
are refused (``submit`` returns False) so the tool can stop capturing while training goes on.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable

__all__ = ["CaseWriter"]


class CaseWriter:
    """Runs submitted jobs on daemon threads, started in the order they were submitted."""

    def __init__(self, max_queued_bytes: int = 256 * 2**20, name: str = "op_tools-writer", threads: int = 1) -> None:
        self.max_queued_bytes = max_queued_bytes
        self.failure: str | None = None
        self._jobs: collections.deque[tuple[Callable[[], None], int]] = collections.deque()
        self._queued_bytes = 0
        self._busy = 0
        self._closing = False
        self._cond = threading.Condition()
        self.waits = 0
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[], None], nbytes: int) -> bool:
        """Queue ``job``; waits while the queue is full. False once the writer has failed or closed."""
        with self._cond:
            if self.failure is not None or self._closing:
                return False
            if self._queued_bytes and self._queued_bytes + nbytes > self.max_queued_bytes:
                self.waits += 1
                while (self._queued_bytes and self._queued_bytes + nbytes > self.max_queued_bytes
                       and self.failure is None):
                    self._cond.wait()
                if self.failure is not None:
                    return False
            self._jobs.append((job, nbytes))
            self._queued_bytes += nbytes
            self._cond.notify_all()
        return True

    def flush(self) -> None:
        """Wait until every job submitted so far has finished, on every thread (a failed job counts as
        finished: its error is in :attr:`failure`)."""
        with self._cond:
            while self._jobs or self._busy:
                self._cond.wait()

    def close(self) -> None:
        """Flush and end the thread."""
        self.flush()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closing:
                    self._cond.wait()
                if not self._jobs:
                    return
                job, nbytes = self._jobs.popleft()
                self._busy += 1
            try:
                if self.failure is None:
                    job()
            except OSError as exc:
                self._fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
            except Exception as exc:  # a bug in a job must not kill the thread silently
                self._fail(f"{type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._busy -= 1  # jobs in flight on the other threads still count
                    self._queued_bytes -= nbytes
                    self._cond.notify_all()

    def _fail(self, message: str) -> None:
        with self._cond:
            if self.failure is None:
                self.failure = message
                print(f"op_tools: writing results failed ({message}); capturing stops, training goes on",
                      file=sys.stderr, flush=True)
                self._queued_bytes -= sum(nbytes for _, nbytes in self._jobs)
                self._jobs.clear()
                self._cond.notify_all()
