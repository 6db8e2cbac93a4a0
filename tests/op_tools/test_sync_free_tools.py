"""Tools that add no host synchronisation per op: OpObserve, OpTimeMeasure(mode="event") and
OpCapture(mode="stats") add at most a constant per training step (torch_dipu.host_sync counts), while
OpCapture(stats) writes the same statistics as when it read them call by call."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import op_tools
import torch_dipu  # noqa: F401
from diopi import case_format as cf
from diopi import steps
from op_tools import autograd_hooks, capture
from op_tools.engine import engine
from op_tools.tensor_stats import device_stats
from op_tools.time_measure import OpTimeMeasure
from torch_dipu.call_counter import count_function_calls
from torch_dipu.host_sync import counting

STEPS = 3
MAX_ADDED_PER_STEP = 2


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(steps, "_step", steps.current_step())
    for name in ("OP_TOOLS_DEVICE", "OP_CAPTURE_MODE", "OP_TIME_MEASURE_MODE", "OP_TOOLS_VERBOSE"):
        monkeypatch.delenv(name, raising=False)
    yield
    for tool in list(engine.tools):
        tool.stop()


def _training() -> Callable[[], None]:
    """One step of a small model on dipu (forward, backward, AdamW), with no read on the host."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)).to("dipu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 6, generator=gen).to("dipu"), torch.randn(8, 3, generator=gen).to("dipu")

    def step() -> None:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def _per_step(step: Callable[[], None], tool: Any | None) -> tuple[list[int], int]:
    """Synchronisations of each of :data:`STEPS` steps run under ``tool``, and device kernels per step."""
    syncs = []
    with count_function_calls() as kernels:
        if tool is not None:
            tool.start()
        try:
            for _ in range(STEPS):
                with counting() as counts:
                    step()
                syncs.append(counts.total)
        finally:
            if tool is not None:
                tool.stop()
    return syncs, sum(kernels.values()) // STEPS


TOOLS: dict[str, Callable[[Path], Any]] = {
    "observe": lambda d: op_tools.OpObserve(file=d / "observe.log"),
    "time_measure_event": lambda d: OpTimeMeasure(mode="event", results_dir=d),
    "capture_stats": lambda d: op_tools.OpCapture(mode="stats", results_dir=d, run_id="s"),
}


@pytest.mark.parametrize("kind", list(TOOLS))
def test_tool_adds_at_most_a_constant_per_step(kind: str, tmp_path: Path) -> None:
    step = _training()
    step()  # handlers built, optimizer state created
    plain, plain_kernels = _per_step(step, None)
    assert plain == [0] * STEPS
    syncs, kernels = _per_step(step, TOOLS[kind](tmp_path))
    assert plain_kernels >= 24  # dozens of device ops per step ...
    assert max(syncs) <= MAX_ADDED_PER_STEP, syncs  # ... and at most a constant of synchronisations
    assert kernels >= plain_kernels


def _immediate_stats(keys: list[str], tensors: list[torch.Tensor]) -> dict[str, dict[str, Any]]:
    """What OpCapture(stats) did before statistics were deferred: each call's statistics read at once."""
    unique = list({id(t): t for t in tensors}.values())
    by_id = {id(t): values for t, values in zip(unique, device_stats(unique), strict=True)}
    return {key: {"shape": list(t.shape), "dtype": cf.dtype_name(t.dtype), **by_id[id(t)]}
            for key, t in zip(keys, tensors, strict=True)}


def _capture_rows(tmp_path: Path, run_id: str) -> tuple[list[dict[str, Any]], list[int]]:
    step = _training()
    step()
    cap = op_tools.OpCapture(mode="stats", results_dir=tmp_path, run_id=run_id)
    syncs, _ = _per_step(step, cap)
    rows = [json.loads(line) for line in (cap.run_dir / "stats.jsonl").read_text().splitlines()]
    return rows, syncs


def _same_number(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def test_capture_stats_are_those_read_call_by_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deferred, deferred_syncs = _capture_rows(tmp_path, "deferred")
    with monkeypatch.context() as m:  # the previous way: every call's statistics brought to the host at once
        m.setattr(capture, "_device_stats", _immediate_stats)
        m.setattr(autograd_hooks, "_keep_stats", autograd_hooks._keep_stats_now)
        immediate, immediate_syncs = _capture_rows(tmp_path, "immediate")
    forward_calls = sum(r["phase"] == "forward" for r in immediate) // STEPS
    assert forward_calls >= 10
    # The counter sees the old way's synchronisation per call, and none per call in the new one.
    assert min(immediate_syncs) >= forward_calls, immediate_syncs
    assert max(deferred_syncs) <= MAX_ADDED_PER_STEP, deferred_syncs
    # Same rows, in the same order, with the same statistics (within float32 rounding).
    assert [(r["op"], r["phase"], r["step"] - deferred[0]["step"]) for r in deferred] == \
        [(r["op"], r["phase"], r["step"] - immediate[0]["step"]) for r in immediate]
    backward = 0
    for got, want in zip(deferred, immediate, strict=True):
        assert list(got["tensors"]) == list(want["tensors"])
        backward += got["phase"] == "backward"
        for key, stats in got["tensors"].items():
            ref = want["tensors"][key]
            for field in ("shape", "dtype", "numel", "nan", "inf"):
                assert stats[field] == ref[field], (got["op"], key, field)
            for field in ("min", "max", "mean", "std", "norm"):
                assert _same_number(stats[field], ref[field]), (got["op"], key, field, stats[field], ref[field])
    assert backward >= STEPS * 3  # gradients are deferred too


def test_deferred_statistics_of_non_finite_and_odd_tensors() -> None:
    """Device statistics match the CPU kernel's for NaN/Inf, integers, booleans, complex, half, empty,
    non-contiguous and constant tensors; nothing is read until resolve()."""
    from op_tools import deferred_stats
    from op_tools.tensor_stats import tensor_stats

    nan, inf = math.nan, math.inf
    host = [torch.tensor([1.0, nan, inf, -2.0, -inf]), torch.tensor([nan, nan]), torch.arange(10),
            torch.tensor([True, False, True]), torch.tensor([3 + 4j, -1j]), torch.randn(4, 5).t(),
            torch.full((3,), 2.5), torch.randn(6).half(), torch.empty(0), torch.tensor([-inf, 7.0])]
    on_dipu = [t.to("dipu") for t in host]
    into: list[dict[str, Any]] = [{} for _ in on_dipu]
    with counting() as counts:
        deferred_stats.defer([*on_dipu, on_dipu[0]], [*into, extra := {}])
        assert counts.total == 0 and deferred_stats.pending() == len(on_dipu) - 1  # the empty one needs no device
        deferred_stats.resolve()
    assert counts.total == 1 and deferred_stats.pending() == 0
    assert extra == into[0]
    for t, got in zip(host, into, strict=True):
        want = tensor_stats(t)
        assert got.keys() == want.keys()
        for field, value in want.items():
            assert _same_number(got[field], value), (t, field, got[field], value)
