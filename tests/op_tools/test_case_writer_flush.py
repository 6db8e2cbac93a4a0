"""CaseWriter.flush waits for every job on every thread; every file of a case is written atomically.

No timing is asserted. Jobs block on events the test releases, so the interleaving is forced; a thread's
``join(timeout)`` only bounds a hang (LIVENESS), and GRACE is the time an early-returning ``flush`` is given
to show itself: with a correct writer ``flush`` cannot return before the release, whatever the machine's speed.
"""

from __future__ import annotations

import builtins
import errno
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from diopi import case_format as cf
from op_tools.case_writer import CaseWriter

LIVENESS = 60.0  # seconds: a bound on a hang, not a speed claim
GRACE = 1.0  # seconds given to a wrong flush to return early; a correct one stays blocked regardless


class Flusher:
    """Runs ``writer.flush()`` on a thread and records whether the slow job had finished when it returned."""

    def __init__(self, writer: CaseWriter, slow_done: threading.Event) -> None:
        self.returned = threading.Event()
        self.slow_done_at_return: bool | None = None

        def run() -> None:
            writer.flush()
            self.slow_done_at_return = slow_done.is_set()
            self.returned.set()

        self.thread = threading.Thread(target=run, name="test-flush", daemon=True)
        self.thread.start()


class SlowJob:
    """A job that blocks until the test releases it."""

    def __init__(self) -> None:
        self.started, self.release, self.done = threading.Event(), threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.started.set()
        assert self.release.wait(LIVENESS)
        self.done.set()


def assert_flush_waits_for(writer: CaseWriter, slow: SlowJob) -> None:
    """While ``slow`` holds a writer thread, ``flush()`` stays blocked; once released, it returns after it."""
    try:
        flusher = Flusher(writer, slow.done)
        flusher.thread.join(GRACE)
        assert not flusher.returned.is_set(), "flush returned while a job was still being written"
    finally:
        slow.release.set()
    flusher.thread.join(LIVENESS)
    assert flusher.returned.is_set() and flusher.slow_done_at_return is True


def test_flush_waits_for_a_slow_job_while_a_fast_one_finishes_on_the_other_thread() -> None:
    writer = CaseWriter(threads=2)
    slow, fast_done = SlowJob(), threading.Event()
    try:
        assert writer.submit(slow, 1)
        assert slow.started.wait(LIVENESS)  # the slow job holds one thread
        assert writer.submit(fast_done.set, 1)  # the fast one runs on the other and ends
        assert fast_done.wait(LIVENESS)
    except BaseException:
        slow.release.set()  # never leave a writer thread blocked
        raise
    assert_flush_waits_for(writer, slow)
    writer.close()
    assert writer.failure is None


def test_a_failing_job_is_reported_and_flush_still_waits_for_the_job_in_flight(
        capsys: pytest.CaptureFixture) -> None:
    writer = CaseWriter(threads=2)
    slow, failed = SlowJob(), threading.Event()

    def disk_full() -> None:
        failed.set()
        raise OSError(errno.ENOSPC, "No space left on device", "/results/case.json")

    try:
        assert writer.submit(slow, 1)
        assert slow.started.wait(LIVENESS)
        assert writer.submit(disk_full, 1)
        assert failed.wait(LIVENESS)
    except BaseException:
        slow.release.set()  # never leave a writer thread blocked
        raise
    assert_flush_waits_for(writer, slow)
    assert writer.failure == "No space left on device: /results/case.json"
    assert not writer.submit(lambda: None, 1)  # later jobs are refused
    writer.close()
    err = capsys.readouterr().err
    assert err.count("writing results failed (No space left on device: /results/case.json)") == 1


def test_a_job_with_a_bug_does_not_hang_flush_and_is_reported(capsys: pytest.CaptureFixture) -> None:
    writer = CaseWriter(threads=2)

    def buggy() -> None:
        raise RuntimeError("boom")

    assert writer.submit(buggy, 1)
    flusher = Flusher(writer, threading.Event())
    flusher.thread.join(LIVENESS)
    assert flusher.returned.is_set()
    assert writer.failure == "RuntimeError: boom"
    writer.close()
    assert capsys.readouterr().err.count("writing results failed (RuntimeError: boom)") == 1


class PausingFile:
    """A file whose first ``write`` stops halfway until the test resumes it."""

    def __init__(self, f: Any, halfway: threading.Event, resume: threading.Event, fail: bool) -> None:
        self._f, self._halfway, self._resume, self._fail = f, halfway, resume, fail

    def write(self, data: Any) -> int:
        if self._halfway.is_set():
            return self._f.write(data)
        half = len(data) // 2
        n = self._f.write(data[:half])
        self._f.flush()
        self._halfway.set()
        assert self._resume.wait(LIVENESS)
        if self._fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        return n + self._f.write(data[half:])

    def __enter__(self) -> PausingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@pytest.fixture
def paused_write(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Makes the case format's writes pause halfway; yields ``(halfway, resume, set_fail)``."""
    halfway, resume, state = threading.Event(), threading.Event(), {"fail": False}

    def pausing_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = builtins.open(file, mode, *args, **kwargs)  # noqa: SIM115  (closed by the caller's with)
        return PausingFile(f, halfway, resume, state["fail"]) if "w" in mode else f

    monkeypatch.setattr(cf, "open", pausing_open, raising=False)
    yield halfway, resume, state
    resume.set()


def in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn(*args)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def test_case_json_is_never_seen_truncated_while_it_is_rewritten(tmp_path: Path, paused_write: Any) -> None:
    halfway, resume, _ = paused_write
    path = tmp_path / cf.CASE_FILE
    old, new = {"op": "old", "n": list(range(50))}, {"op": "new", "n": list(range(500))}
    resume.set()
    cf.write_json(path, old)  # the first version, written without a pause
    halfway.clear()
    resume.clear()
    thread, errors = in_thread(cf.write_json, path, new)
    try:
        assert halfway.wait(LIVENESS)
        assert json.loads(path.read_text(encoding="utf-8")) == old  # the old complete file, never a part
    finally:
        resume.set()
    thread.join(LIVENESS)
    assert not errors and json.loads(path.read_text(encoding="utf-8")) == new
    assert [p.name for p in tmp_path.iterdir()] == [cf.CASE_FILE]  # no temporary file left behind


def test_a_new_case_json_appears_only_when_complete(tmp_path: Path, paused_write: Any) -> None:
    halfway, resume, _ = paused_write
    path = tmp_path / cf.CASE_FILE
    thread, errors = in_thread(cf.write_json, path, {"op": "x", "n": list(range(500))})
    try:
        assert halfway.wait(LIVENESS)
        assert not path.exists()  # readers find cases by case.json: a half-written one must not be there
    finally:
        resume.set()
    thread.join(LIVENESS)
    assert not errors and json.loads(path.read_text(encoding="utf-8"))["op"] == "x"


def test_a_new_tensors_file_appears_only_when_complete(tmp_path: Path, paused_write: Any) -> None:
    halfway, resume, _ = paused_write
    path = tmp_path / cf.TENSORS_FILE
    data = {"t0": torch.arange(1000, dtype=torch.float32)}
    thread, errors = in_thread(cf.write_tensors, path, data)
    try:
        assert halfway.wait(LIVENESS)
        assert not path.exists()
    finally:
        resume.set()
    thread.join(LIVENESS)
    assert not errors and torch.equal(load_file(str(path))["t0"], data["t0"])
    assert [p.name for p in tmp_path.iterdir()] == [cf.TENSORS_FILE]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path: Path, paused_write: Any) -> None:
    halfway, resume, state = paused_write
    path = tmp_path / cf.CASE_FILE
    resume.set()
    cf.write_json(path, {"op": "old"})
    halfway.clear()
    state["fail"] = True
    with pytest.raises(OSError, match="No space left on device"):
        cf.write_json(path, {"op": "new", "n": list(range(500))})
    assert json.loads(path.read_text(encoding="utf-8")) == {"op": "old"}
    assert [p.name for p in tmp_path.iterdir()] == [cf.CASE_FILE]
