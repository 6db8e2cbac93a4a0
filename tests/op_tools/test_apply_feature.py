"""apply_feature: tools applied to functions outside torch (patched by dotted name, or wrapped callables)."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from op_tools import OpObserve, apply_feature
from op_tools.engine import engine
from op_tools.features import FEATURES
from op_tools.replay import ReplayOptions, replay_case

MODULE = "opt_fused_kernels"
OP = f"{MODULE}.fused_scale"
_ENV = ("OP_OBSERVE_LIST", "OP_OBSERVE_DISABLE_LIST", "OP_OBSERVE_FILE", "OP_TOOLS_VERBOSE", "OP_TOOLS_DEVICE",
        "OP_CAPTURE_LIST", "OP_CAPTURE_DISABLE_LIST", "OP_CAPTURE_STEPS", "OP_CAPTURE_MODE", "OP_TOOLS_RESULTS_DIR",
        "OP_TOOLS_RUN_ID", "OP_CAPTURE_MAX_BYTES")


@pytest.fixture
def kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A throwaway module ``opt_fused_kernels`` (importable from ``tmp_path``) with ``fused_scale(x, s)``."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{MODULE}.py").write_text(textwrap.dedent('''
        def fused_scale(x, s):
            return x * s


        class Ops:
            @staticmethod
            def shift(x, k):
                return x + k
    '''), encoding="utf-8")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    module = importlib.import_module(MODULE)
    yield module
    sys.modules.pop(MODULE, None)
    for tool in list(engine.tools):
        tool.stop()


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("OpObserve: ")]


# -- 10. patching by dotted name -----------------------------------------------------------------------
def test_observe_dotted_name_reports_calls_and_remove_restores(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    original = kernels.fused_scale
    handle = apply_feature(OP, "observe", device="cpu", file=out)
    assert isinstance(handle.tool, OpObserve)
    assert kernels.fused_scale is not original
    assert kernels.fused_scale.__wrapped__ is original
    assert kernels.fused_scale.__name__ == "fused_scale"

    x = torch.arange(3.0)
    result = kernels.fused_scale(x, 2.0)
    assert torch.equal(result, torch.tensor([0.0, 2.0, 4.0]))
    handle.remove()  # restores and flushes the file

    assert kernels.fused_scale is original
    assert handle.patched == []
    lines = _lines(out)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"OpObserve: {OP} (float32[3], 2.0) -> float32[3] on cpu at {Path(__file__)}:")
    assert "result = kernels.fused_scale(x, 2.0)" in lines[0]
    assert handle.tool.observed == 1

    kernels.fused_scale(x, 3.0)  # not reported any more
    assert len(_lines(out)) == 1
    assert handle.tool.observed == 1


def test_only_the_named_function_is_reported_not_torch_calls(kernels: ModuleType, tmp_path: Path) -> None:
    """The tool is not started: torch's own calls (inside or outside the function) are not observed."""
    out = tmp_path / "observe.txt"
    handle = apply_feature(OP, "observe", device="cpu", file=out)
    try:
        x = torch.ones(2)
        x.neg()
        kernels.fused_scale(x.exp(), 4)
        assert engine.tools == []
    finally:
        handle.remove()
    assert [ln.split()[1] for ln in _lines(out)] == [OP]


def test_dotted_name_of_a_class_attribute(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    handle = apply_feature(f"{MODULE}.Ops.shift", "op_observe", device="cpu", file=out)
    assert torch.equal(kernels.Ops.shift(torch.zeros(2), 1), torch.ones(2))
    handle.remove()
    assert torch.equal(kernels.Ops.shift(torch.zeros(2), 2), torch.full((2,), 2.0))
    assert [ln.split()[1] for ln in _lines(out)] == [f"{MODULE}.Ops.shift"]


def test_staticmethod_stays_a_staticmethod(kernels: ModuleType, tmp_path: Path) -> None:
    original = kernels.Ops.__dict__["shift"]
    handle = apply_feature(f"{MODULE}.Ops.shift", "observe", device="cpu", file=tmp_path / "observe.txt")
    try:
        assert torch.equal(kernels.Ops().shift(torch.zeros(2), 1), torch.ones(2))
    finally:
        handle.remove()
    assert kernels.Ops.__dict__["shift"] is original
    assert torch.equal(kernels.Ops().shift(torch.zeros(2), 1), torch.ones(2))


def test_backward_through_patched_function_is_reported(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    handle = apply_feature(OP, "observe", device="cpu", file=out)
    x = torch.randn(2, 3, requires_grad=True)
    kernels.fused_scale(x, 2.0).sum().backward()
    handle.remove()
    lines = _lines(out)
    assert lines[1] == f"OpObserve: {OP} backward (grad_outputs: float32[2, 3]) -> (grad_inputs: float32[2, 3])"
    assert torch.equal(x.grad, torch.full((2, 3), 2.0))


# -- 11. condition -------------------------------------------------------------------------------------
def test_condition_selects_the_calls_reported(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    handle = apply_feature(OP, "observe", condition=lambda x, s: s > 1, device="cpu", file=out, backward=False)
    x = torch.ones(2)
    results = [kernels.fused_scale(x, s) for s in (0.5, 2.0, 1.0, 3.0)]
    handle.remove()
    assert [r.tolist() for r in results] == [[0.5, 0.5], [2.0, 2.0], [1.0, 1.0], [3.0, 3.0]]
    lines = _lines(out)
    assert len(lines) == 2, lines
    assert "(float32[2], 2.0)" in lines[0] and "(float32[2], 3.0)" in lines[1]
    assert handle.tool.observed == 2


def test_condition_with_keyword_arguments(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    handle = apply_feature(OP, "observe", condition=lambda x, s: s > 1, device="cpu", file=out, backward=False)
    kernels.fused_scale(torch.ones(2), s=5)
    kernels.fused_scale(x=torch.ones(2), s=0)
    handle.remove()
    lines = _lines(out)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"OpObserve: {OP} (float32[2], s=5) -> float32[2] on cpu")


# -- 12. capture and replay ----------------------------------------------------------------------------
def test_capture_writes_a_case_that_replays_bitwise(kernels: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    handle = apply_feature(OP, "capture", device="cpu", results_dir=results, run_id="run")
    x = torch.randn(3, 4, requires_grad=True)
    y = kernels.fused_scale(x, 1.5)
    y.sum().backward()
    handle.remove()  # writes everything

    cases = sorted(results.glob(f"op_capture/*/rank*/{OP}/*/case.json"))
    assert len(cases) == 1, list(results.rglob("*"))
    case_dir = cases[0].parent
    assert case_dir.parent.name == OP
    assert case_dir.name.isdigit()
    record = json.loads(cases[0].read_text(encoding="utf-8"))
    assert record["op"] == OP
    assert record["device"] == "cpu"
    assert record["backward"] is not None

    refused = replay_case(case_dir)  # replay calls functions outside torch only when their module is allowed
    assert refused.status == "ERROR" and "--allow_module opt_fused_kernels" in refused.message
    result = replay_case(case_dir, ReplayOptions(allow_modules=("opt_fused_kernels",)))
    assert result.status == "PASS", result.message
    assert result.op == OP
    assert result.bitwise_forward is True
    assert result.bitwise_backward is True


def test_capture_without_grad_replays_forward(kernels: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    handle = apply_feature(OP, "capture", device="cpu", results_dir=results, run_id="run")
    kernels.fused_scale(torch.arange(6.0).reshape(2, 3), 3)
    handle.remove()
    (case,) = results.glob(f"op_capture/run/rank*/{OP}/*/case.json")
    result = replay_case(case.parent, ReplayOptions(allow_modules=("opt_fused_kernels",)))
    assert (result.status, result.bitwise_forward) == ("PASS", True), result.message


# -- 13. errors and callables --------------------------------------------------------------------------
def test_unknown_feature_lists_known_features(kernels: ModuleType) -> None:
    with pytest.raises(ValueError, match="unknown feature 'no_such_feature'") as info:
        apply_feature(OP, "no_such_feature")
    message = str(info.value)
    for name in ("capture", "observe", "op_capture", "op_observe"):
        assert name in message
    assert set(FEATURES) >= {"capture", "observe"}


@pytest.mark.parametrize("name", [f"{MODULE}.no_such_function", "opt_no_such_module_xyz.f", f"{MODULE}.Ops.nope"])
def test_name_not_found_raises_naming_it(kernels: ModuleType, tmp_path: Path, name: str) -> None:
    original = kernels.fused_scale
    with pytest.raises(ValueError, match=f"cannot find the function '{name}'"):
        apply_feature([OP, name], "observe", device="cpu", file=tmp_path / "x.txt")
    assert kernels.fused_scale is original  # nothing was patched


def test_not_a_name_or_callable_raises_type_error(kernels: ModuleType) -> None:
    with pytest.raises(TypeError, match="dotted name or a callable"):
        apply_feature(42, "observe", device="cpu")  # type: ignore[arg-type]


def test_callable_returns_reporting_wrapper(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    original = kernels.fused_scale
    handle = apply_feature(original, "observe", device="cpu", file=out, backward=False)
    assert handle.patched == []
    assert kernels.fused_scale is original  # a callable is wrapped, not patched
    (wrapper,) = handle.wrapped
    assert wrapper is not original and wrapper.__wrapped__ is original
    assert torch.equal(wrapper(torch.ones(2), 2), torch.full((2,), 2.0))
    original(torch.ones(2), 2)  # the original does not report
    handle.remove()
    lines = _lines(out)
    assert len(lines) == 1
    assert lines[0].startswith(f"OpObserve: {OP} (float32[2], 2) -> float32[2] on cpu")


def test_tool_instance_as_feature(kernels: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    tool = OpObserve(device="cpu", file=out, backward=False)
    handle = apply_feature(OP, tool)
    assert handle.tool is tool
    kernels.fused_scale(torch.ones(1), 2)
    handle.remove()
    assert tool.observed == 1 and len(_lines(out)) == 1
