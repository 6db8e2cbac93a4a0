"""Profiler ranges: while torch.profiler records, every op call the tools' engine sees is a range named after
the call, and every dipu kernel a range named after its DIOPI function; with the profiler off, no range is
opened at all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (the dipu device)
from op_tools import engine as engine_module
from op_tools.profiler_ranges import OpProfilerRanges
from op_tools.tool import OpTool
from torch_dipu import dispatch, kernels

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


class Counting(OpTool):
    """An acting tool on dipu that counts the calls it saw."""

    def __init__(self, **kw) -> None:
        super().__init__(device="dipu", **kw)
        self.seen: list[str] = []

    def before(self, call):
        self.seen.append(call.name)


def _trace(prof: torch.profiler.profile, tmp_path: Path) -> list[dict]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f)["traceEvents"]


def _profile(fn) -> torch.profiler.profile:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False) as prof:
        fn()
    return prof


def test_w1_step_on_dipu_trace_names_api_calls_and_diopi_functions(tmp_path):
    pytest.importorskip("transformers")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from bench_common import w1_step
    finally:
        sys.path.remove(str(BENCHMARKS))
    step = w1_step("dipu")
    step()  # warm-up: handlers built outside the trace
    with OpProfilerRanges():
        prof = _profile(step)
    events = _trace(prof, tmp_path)
    names = {e.get("name") for e in events}
    # linear runs as the vendor's fused linear on the device (torch_dipu claims the composite aten.linear)
    assert "torch.nn.functional.linear" in names
    assert "diopiLinear" in names
    assert {"torch.nn.functional.embedding", "diopiEmbedding", "torch.nn.functional.cross_entropy"} <= names
    assert "diopiEmbeddingBackward" in names  # backward kernels are named too
    assert any(n and n.startswith("aten::") for n in names)

    # each diopiLinear of a forward linear lies inside a torch.nn.functional.linear range of the same thread
    ranges = [e for e in events if e.get("ph") == "X"]
    linears = [e for e in ranges if e["name"] == "torch.nn.functional.linear"]
    mms = [e for e in ranges if e["name"] == "diopiLinear"]
    inside = [m for m in mms if any(lin["tid"] == m["tid"] and lin["ts"] <= m["ts"]
                                    and m["ts"] + m["dur"] <= lin["ts"] + lin["dur"] for lin in linears)]
    assert len(inside) >= len(linears) > 0


def test_acting_tool_calls_are_ranges_and_results_unchanged(tmp_path):
    x = torch.randn(4, 5, device="dipu")
    w = torch.randn(3, 5, device="dipu")
    expected = torch.nn.functional.linear(x, w).add(1).cpu()
    tool = Counting()
    with tool:
        holder = {}
        prof = _profile(lambda: holder.setdefault("y", torch.nn.functional.linear(x, w).add(1)))
    assert torch.equal(holder["y"].cpu(), expected)
    assert tool.seen == ["torch.nn.functional.linear", "torch.Tensor.add"]
    names = [e.get("name") for e in _trace(prof, tmp_path)]
    assert names.count("torch.nn.functional.linear") == 1 and names.count("torch.Tensor.add") == 1
    assert "diopiLinear" in names and "diopiAdd" in names


def test_no_record_function_without_the_profiler(monkeypatch):
    def forbidden(name):
        raise AssertionError(f"record_function({name!r}) called with the profiler off")

    monkeypatch.setattr(engine_module, "_record_function", forbidden)
    monkeypatch.setattr(dispatch, "_record_function", forbidden)
    x = torch.randn(8, 8, device="dipu", requires_grad=True)
    with Counting(), OpProfilerRanges():
        y = torch.nn.functional.linear(x, x).relu().sum()
        y.backward()
    assert x.grad is not None and torch.isfinite(x.grad.cpu()).all()

    # the patched names are the ones used: with the profiler on, both are reached
    calls: list[str] = []

    def counting(name):
        calls.append(name)
        return torch.profiler.record_function(name)

    monkeypatch.setattr(engine_module, "_record_function", counting)
    monkeypatch.setattr(dispatch, "_record_function", counting)
    w = x.detach()
    with OpProfilerRanges():
        _profile(lambda: torch.nn.functional.linear(w, w))
    assert "torch.nn.functional.linear" in calls and "diopiLinear" in calls


def test_profiler_ranges_tool_acts_on_nothing():
    tool = OpProfilerRanges()
    assert not tool.acts_on("torch.nn.functional.linear")
    a = torch.ones(3, device="dipu")
    with tool:
        assert torch.equal((a + a).cpu(), torch.full((3,), 2.0))


def test_range_names_of_kernel_plans():
    mm = torch.ops.aten.mm.default
    fn = kernels.diopi.function_for_aten(mm)
    assert dispatch.range_name(mm, kernels.KernelPlan("vendor", lambda *a: None, fn)) == "diopiMm"
    add = torch.ops.aten.add.Tensor
    fallback = kernels.KernelPlan("fallback", kernels.reference_impl, None)
    assert dispatch.range_name(add, fallback) == "fallback::aten.add.Tensor"
    view = torch.ops.aten.view.default
    assert dispatch.range_name(view, kernels.KernelPlan("native", kernels.reference_impl, None)) is None
