"""op_tools.host_stats_worker: host statistics reduced on a background thread give the inline figures, of the
values at submit time, with memory bounded and errors reported."""

from __future__ import annotations

import pytest
import torch

from op_tools import host_stats_worker
from op_tools.tensor_stats import tensor_stats


def test_background_figures_equal_inline_and_are_taken_at_submit_time() -> None:
    torch.manual_seed(0)
    tensors = [torch.randn(300, 7), torch.randn(5).double(), torch.tensor([1.0, float("nan"), float("inf")]),
               torch.arange(6, dtype=torch.int32), torch.randn(4, 4).t()]
    expected = [tensor_stats(t) for t in tensors]
    targets: list[dict] = [{} for _ in tensors]
    for t, target in zip(tensors, targets, strict=True):
        host_stats_worker.submit(t, target)
    for t in tensors:  # changed in place right after the hook: the statistics keep the values at submit
        t.mul_(3)
    host_stats_worker.wait()
    assert targets == expected


def test_over_the_memory_bound_it_reduces_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_stats_worker, "MAX_WAITING_BYTES", 0)
    target: dict = {}
    host_stats_worker.submit(torch.ones(3), target)
    assert target["mean"] == 1.0  # filled before wait()


def test_an_error_on_the_thread_is_raised_by_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(t: torch.Tensor) -> dict:
        raise RuntimeError("kernel broke")

    monkeypatch.setattr(host_stats_worker, "tensor_stats", broken)
    host_stats_worker.submit(torch.ones(3), {})
    with pytest.raises(RuntimeError, match="kernel broke"):
        host_stats_worker.wait()
    host_stats_worker.wait()  # reported once
