"""apply_feature as upstream op_tools' README and tests call it: ``ops=``, ``condition_func=``, its feature
names, and callables such as ``torch.add`` patched in place (on dipu, as upstream's tests run on "cuda")."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import op_tools
import torch_dipu  # noqa: F401  (the "dipu" device)
from op_tools import OpDtypeCast, OpObserve, OpTimeMeasure
from op_tools.features import _live

DEV = "dipu"
MODULE = "opt_upstream_kernels"
_ENV = ("OP_OBSERVE_LIST", "OP_OBSERVE_DISABLE_LIST", "OP_OBSERVE_FILE", "OP_TOOLS_VERBOSE", "OP_TOOLS_DEVICE",
        "OP_DTYPE_CAST_DICT", "OP_DTYPE_CAST_LIST", "OP_DTYPE_CAST_DISABLE_LIST", "OP_TIME_MEASURE_LIST",
        "OP_TIME_MEASURE_DISABLE_LIST", "OP_TIME_MEASURE_MODE", "OP_TOOLS_RUN_ID")


@pytest.fixture(autouse=True)
def _clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Upstream scripts never undo apply_feature: undo every handle after each test."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OP_TOOLS_RESULTS_DIR", str(tmp_path / "results"))
    originals = (torch.add, torch.sub, torch.mul, torch.div)
    yield
    for handle in list(reversed(_live)):
        handle.remove()
    assert (torch.add, torch.sub, torch.mul, torch.div) == originals
    assert "add" not in torch.Tensor.__dict__


@pytest.fixture
def kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A module with ``probe(x)``, which records the dtype it was given."""
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{MODULE}.py").write_text(textwrap.dedent('''
        seen = []


        def probe(x):
            seen.append(x.dtype)
            return x + 1
    '''), encoding="utf-8")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield importlib.import_module(MODULE)
    sys.modules.pop(MODULE, None)


def _test_function(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Upstream's test_custom_apply_hook._test_function, trimmed."""
    a = torch.add(x, y) * 2
    b = torch.sub(a, y) / 3
    c = torch.mul(b, a) + 1
    d = torch.div(c, b) - 2
    d.backward(torch.ones_like(d))
    assert d.device == x.device and d.dtype == x.dtype and d.shape == x.shape
    assert (x.grad is not None) == x.requires_grad
    return d


def _observe_lines(err: str, op: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith(f"OpObserve: {op} (")]


OPS = ["torch.add", "torch.sub", "torch.mul", "torch.div"]


@pytest.mark.parametrize("ops", [OPS, [torch.add, torch.sub, torch.mul, torch.div]], ids=["names", "callables"])
def test_dump_op_args_prints_every_call(ops: list, capfd: pytest.CaptureFixture[str]) -> None:
    handle = op_tools.apply_feature(ops=ops, feature="dump_op_args")
    assert isinstance(handle.tool, OpObserve)
    assert torch.add is not handle.patched[0][2]  # patched in place, callables included
    x = torch.tensor([1, 2, 3], dtype=torch.float16, device=DEV, requires_grad=True)
    y = torch.tensor([4, 5, 6], dtype=torch.float16, device=DEV, requires_grad=True)
    d = _test_function(x, y)
    expected = ((((x + y) * 2 - y) / 3 * ((x + y) * 2) + 1) / (((x + y) * 2 - y) / 3)) - 2
    assert torch.equal(d, expected.detach())
    err = capfd.readouterr().err
    for op in OPS:
        (line,) = _observe_lines(err, op)
        assert "float16[3]" in line and "on dipu:0" in line, line
    assert "torch.add (float16[3], float16[3]) -> float16[3]" in err
    assert handle.tool.observed == 4


def test_cast_dtype_runs_the_call_in_float32(kernels: ModuleType) -> None:
    handle = op_tools.apply_feature(ops=[kernels.probe, torch.add], feature="cast_dtype")
    assert isinstance(handle.tool, OpDtypeCast)
    x = torch.randn(4, 5, dtype=torch.float16, device=DEV)
    out = kernels.probe(x)  # the module's attribute is the wrapper: patched in place
    assert kernels.seen == [torch.float32]  # the function saw the cast input
    assert out.dtype == torch.float16  # and the result went back to the call's dtype
    assert torch.equal(out, (x.float() + 1).half())
    s = torch.add(x, x)
    assert s.dtype == torch.float16 and torch.equal(s, (x.float() + x.float()).half())
    assert handle.tool.casts == 2
    handle.remove()
    assert [row["name"] for row in handle.tool.results] == [f"{MODULE}.probe", "torch.add"]


def test_cast_dtype_with_upstream_test_function() -> None:
    handle = op_tools.apply_feature(ops=OPS, feature="cast_dtype")
    x = torch.randn(4, 5, dtype=torch.float16, device=DEV, requires_grad=True)
    y = torch.rand(4, 5, dtype=torch.float16, device=DEV, requires_grad=True)
    _test_function(x, y)
    assert handle.tool.casts == 4
    assert x.grad is not None and x.grad.dtype == torch.float16


def test_measure_op_time_records_times_for_the_ops() -> None:
    handle = op_tools.apply_feature(ops=OPS, feature="measure_op_time")
    assert isinstance(handle.tool, OpTimeMeasure)
    x = torch.tensor([1, 2, 3], device=DEV, dtype=torch.float16, requires_grad=True)
    y = torch.tensor([4, 5, 6], device=DEV, dtype=torch.float16, requires_grad=True)
    _test_function(x, y)
    handle.remove()
    rows = handle.tool.results
    forward = {row["name"]: row["elapsed_ms"] for row in rows if row["phase"] == "forward"}
    assert sorted(forward) == sorted(OPS)
    assert all(isinstance(ms, float) and ms >= 0 for ms in forward.values())
    assert {row["name"] for row in rows if row["phase"] == "backward"} == set(OPS)


def test_condition_func_false_leaves_the_call_unobserved(capfd: pytest.CaptureFixture[str]) -> None:
    decisions = []

    def condition_func(a: torch.Tensor, b: torch.Tensor, **kwargs: object) -> bool:  # upstream's signature
        decisions.append(a.dtype)
        return a.dtype == torch.float16

    handle = op_tools.apply_feature(ops=OPS, feature="dump_op_args", condition_func=condition_func)
    x16 = torch.tensor([1, 2, 3], dtype=torch.float16, device=DEV)
    x32 = torch.tensor([1, 2, 3], dtype=torch.float32, device=DEV)
    assert torch.equal(torch.add(x32, x32), torch.tensor([2.0, 4.0, 6.0], device=DEV))
    assert _observe_lines(capfd.readouterr().err, "torch.add") == []
    assert handle.tool.observed == 0
    torch.add(x16, x16, alpha=2)
    (line,) = _observe_lines(capfd.readouterr().err, "torch.add")
    assert "alpha=2" in line
    assert decisions == [torch.float32, torch.float16]
    assert handle.tool.observed == 1


def test_condition_func_list_one_per_op(capfd: pytest.CaptureFixture[str]) -> None:
    """Upstream also takes a list: the i-th predicate for the i-th op; ops past its end always act."""
    op_tools.apply_feature(["torch.add", "torch.sub", "torch.mul"], feature="dump_op_args",
                           condition_func=[lambda a, b: False, lambda a, b: a.dim() == 2])
    x = torch.ones(2, 2, device=DEV)
    torch.add(x, x)
    torch.sub(x, x)
    torch.sub(x[0], x[0])
    torch.mul(x[0], x[0])
    err = capfd.readouterr().err
    assert _observe_lines(err, "torch.add") == []
    assert len(_observe_lines(err, "torch.sub")) == 1 and "float32[2, 2]" in _observe_lines(err, "torch.sub")[0]
    assert len(_observe_lines(err, "torch.mul")) == 1


def test_positional_string_and_upstream_keywords(capfd: pytest.CaptureFixture[str]) -> None:
    """``apply_feature("torch.add", feature=..., condition_func=...)``, as upstream's condition example."""
    op_tools.apply_feature("torch.add", feature="dump_op_args", condition_func=lambda a, b: a.dim() == 2)
    torch.add(torch.ones(2, 3, device=DEV), 1)
    torch.add(torch.ones(3, device=DEV), 1)
    assert len(_observe_lines(capfd.readouterr().err, "torch.add")) == 1


def test_tensor_method_callable_patched_and_restored(capfd: pytest.CaptureFixture[str]) -> None:
    handle = op_tools.apply_feature(ops=[torch.Tensor.add], feature="dump_op_args")
    x = torch.ones(2, device=DEV)
    assert torch.equal(x.add(x), torch.full((2,), 2.0, device=DEV))
    assert len(_observe_lines(capfd.readouterr().err, "torch.Tensor.add")) == 1
    handle.remove()
    assert "add" not in torch.Tensor.__dict__  # inherited method: the patch is deleted, not shadowed
    x.add(x)
    assert _observe_lines(capfd.readouterr().err, "torch.Tensor.add") == []


def test_a_callable_already_patched_by_a_feature_is_patched_again() -> None:
    """op_tools.md's sequence: names first, then the patched ``torch.add`` itself as a callable; torch's name
    table was built before the patch (an earlier tool resolved a name), so only the wrapped original is in it."""
    from torch.overrides import resolve_name

    resolve_name(torch.add)  # the table now knows the unpatched torch.add
    op_tools.apply_feature(ops=["torch.add", "torch.sub"], feature="cast_dtype")
    handle = op_tools.apply_feature(ops=[torch.add, torch.Tensor.mul], feature="measure_op_time")
    x = torch.ones(3, dtype=torch.float16, device=DEV)
    assert torch.equal(torch.add(x, x), torch.full((3,), 2.0, dtype=torch.float16, device=DEV))
    assert [row["name"] for row in handle.tool.summary()] == ["torch.add"]


def test_upstream_feature_names_all_known() -> None:
    from op_tools.features import FEATURES, UPSTREAM_FEATURES

    for name, tool in UPSTREAM_FEATURES.items():
        assert FEATURES[name].__name__ == tool


# -- bad input: one clear error naming it ---------------------------------------------------------------
def test_unknown_feature_named() -> None:
    with pytest.raises(ValueError, match="unknown feature 'dump_args'"):
        op_tools.apply_feature(ops=OPS, feature="dump_args")
    assert _live == []


@pytest.mark.parametrize(("entry", "exc", "match"), [
    (42, TypeError, "got 42"),
    ("torch.float16", TypeError, "'torch.float16' is a dtype, not a function"),
    ("torch.nn", TypeError, "'torch.nn' is a module, not a function"),
    (torch.nn.Linear, TypeError, "got <class 'torch.nn.modules.linear.Linear'>"),
    (lambda x: x, ValueError, "cannot patch <function .*<lambda>.* in place"),
])
def test_bad_ops_entry_named(entry: object, exc: type[Exception], match: str) -> None:
    original = torch.add
    with pytest.raises(exc, match=match):
        op_tools.apply_feature(ops=[torch.add, entry], feature="dump_op_args")
    assert torch.add is original  # nothing was patched
    assert _live == []


def test_bad_condition_func_named() -> None:
    with pytest.raises(TypeError, match="condition_func '' is not callable"):
        op_tools.apply_feature(ops=OPS, feature="dump_op_args", condition_func="")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        op_tools.apply_feature(ops=OPS, feature="dump_op_args", condition=bool, condition_func=bool)
    with pytest.raises(TypeError, match="give feature="):
        op_tools.apply_feature(ops=OPS)
