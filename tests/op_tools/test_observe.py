"""OpObserve: the lines it prints, what it reports, its op lists, nesting, and that it never changes a result."""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from diopi import steps
from op_tools import OpObserve, protocol
from op_tools.engine import engine

_ENV = ("OP_OBSERVE_LIST", "OP_OBSERVE_DISABLE_LIST", "OP_OBSERVE_FILE", "OP_TOOLS_VERBOSE", "OP_TOOLS_DEVICE")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No op_tools variable of the outer environment leaks in; the global step count (advanced by
    ``optimizer.step()``) is restored and no tool stays active after a test."""
    monkeypatch.setattr(steps, "_step", steps.current_step())
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    for tool in list(engine.tools):
        tool.stop()


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("OpObserve: ")]


def _forward_names(lines: list[str]) -> list[str]:
    """Op names of the forward lines (``OpObserve: <name> (...)``)."""
    return [line.split()[1] for line in lines if " backward (" not in line]


def _observed_names(tmp_path: Path, **options: object) -> list[str]:
    """Run add, mul, addmm and sub on the CPU under an OpObserve built with ``options``; the names it reported."""
    out = tmp_path / f"names{len(list(tmp_path.iterdir()))}.txt"
    a, b = torch.ones(2, 2), torch.full((2, 2), 2.0)
    with OpObserve(device="cpu", file=out, backward=False, **options):
        a.add(b)
        a.mul(b)
        a.addmm(a, b)
        a.sub(b)
    return _forward_names(_lines(out)) if out.exists() else []


# -- 1. content of the lines ---------------------------------------------------------------------------
def test_linear_line_names_op_shapes_device_and_user_call_site(tmp_path: Path) -> None:
    """The forward line of F.linear on 3-D input, its backward line with both input gradients, and sum."""
    out = tmp_path / "observe.txt"
    x3d = torch.randn(2, 3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    with OpObserve(device="cpu", file=out) as obs:
        line_no = inspect.currentframe().f_lineno + 1
        y = torch.nn.functional.linear(x3d, w)
        y.sum().backward()
    lines = _lines(out)
    linear = [ln for ln in lines if ln.startswith("OpObserve: torch.nn.functional.linear (")]
    assert len(linear) == 1, lines
    fwd = linear[0]
    assert "float32[2, 3, 4]" in fwd and "float32[5, 4]" in fwd
    assert "-> float32[2, 3, 5]" in fwd
    assert " on cpu " in fwd
    assert f"{Path(__file__)}:{line_no} " in fwd, fwd
    assert "y = torch.nn.functional.linear(x3d, w)" in fwd
    assert "site-packages" not in fwd.split(" at ", 1)[1]

    backward = [ln for ln in lines if ln.startswith("OpObserve: torch.nn.functional.linear backward")]
    assert len(backward) == 1, lines
    grad_inputs = backward[0].split("grad_inputs:", 1)[1]
    assert "float32[2, 3, 4]" in grad_inputs and "float32[5, 4]" in grad_inputs
    assert "grad_outputs: float32[2, 3, 5]" in backward[0]

    assert any(ln.startswith("OpObserve: torch.Tensor.sum (float32[2, 3, 5])") for ln in lines)
    assert any(ln.startswith("OpObserve: torch.Tensor.sum backward") for ln in lines)
    assert obs.observed == 2
    assert obs.backward_observed == 2
    assert obs.lines == len(lines) == 4


def test_linear_with_bias_on_non_leaf_input_reports_all_three_gradients(tmp_path: Path) -> None:
    """Input gradients reach every input of the call, also one made by an earlier op (not a leaf)."""
    out = tmp_path / "observe.txt"
    leaf = torch.randn(2, 3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    with OpObserve(device="cpu", file=out, ops="torch.nn.functional.linear"):
        x = leaf * 2
        torch.nn.functional.linear(x, w, b).sum().backward()
    backward = [ln for ln in _lines(out) if " backward (" in ln]
    assert len(backward) == 1
    assert backward[0].endswith("(grad_inputs: float32[2, 3, 4], float32[5, 4], float32[5])"), backward[0]


# -- 2. not ops ----------------------------------------------------------------------------------------
def test_attribute_access_and_printing_are_not_ops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "observe.txt"
    x = torch.randn(2, 3, requires_grad=True)
    x.sum().backward()
    with OpObserve(device="cpu", file=out) as obs:
        _ = (x.shape, x.dtype, x.grad, x.device, x.requires_grad, x.is_leaf, x.size(), x.dim(), x.numel())
        print(x)
        print(repr(x), str(x), f"{x.grad}")
    assert "tensor(" in capsys.readouterr().out
    assert obs.observed == 0
    assert obs.lines == 0
    assert not out.exists() or _lines(out) == []


# -- 3. the device -------------------------------------------------------------------------------------
def test_default_device_is_dipu_and_cpu_only_ops_are_not_observed(tmp_path: Path) -> None:
    import torch_dipu  # noqa: F401 (registers the dipu device)

    assert torch.accelerator.current_accelerator().type == "dipu"
    out = tmp_path / "observe.txt"
    cpu = torch.ones(3)
    with OpObserve(file=out, backward=False) as obs:
        assert obs.device_type == "dipu"
        cpu_only = cpu + 1
        on_dipu = cpu.to("dipu")
        doubled = on_dipu * 2
        cpu_only.mul(3)
    lines = _lines(out)
    assert _forward_names(lines) == ["torch.Tensor.to", "torch.Tensor.mul"], lines
    assert lines[0].startswith("OpObserve: torch.Tensor.to (float32[3], 'dipu') -> float32[3] on dipu")
    assert " on dipu" in lines[1]
    assert obs.observed == 2
    assert doubled.device.type == "dipu"
    assert torch.equal(doubled.cpu(), torch.full((3,), 2.0))


# -- 4. op lists ---------------------------------------------------------------------------------------
def test_op_lists_unset_means_all(tmp_path: Path) -> None:
    assert _observed_names(tmp_path) == ["torch.Tensor.add", "torch.Tensor.mul", "torch.Tensor.addmm",
                                         "torch.Tensor.sub"]


def test_op_list_env_empty_means_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_LIST", "")
    assert _observed_names(tmp_path) == []


def test_op_list_keyword_empty_means_none(tmp_path: Path) -> None:
    assert _observed_names(tmp_path, ops="") == []


def test_op_list_env_is_a_whole_name_regex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_LIST", r"torch\.Tensor\.(add|mul)")
    assert _observed_names(tmp_path) == ["torch.Tensor.add", "torch.Tensor.mul"]


def test_op_list_env_comma_separated_exact_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_LIST", " torch.Tensor.sub , torch.Tensor.addmm ")
    assert _observed_names(tmp_path) == ["torch.Tensor.addmm", "torch.Tensor.sub"]


def test_disable_list_env_wins_over_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_LIST", r"torch\.Tensor\..*")
    monkeypatch.setenv("OP_OBSERVE_DISABLE_LIST", r"torch\.Tensor\.add.*")
    assert _observed_names(tmp_path) == ["torch.Tensor.mul", "torch.Tensor.sub"]


def test_disable_ops_keyword_alone(tmp_path: Path) -> None:
    assert _observed_names(tmp_path, disable_ops=["torch.Tensor.mul", "torch.Tensor.sub"]) == [
        "torch.Tensor.add", "torch.Tensor.addmm"]


def test_keywords_override_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_LIST", "torch.Tensor.add")
    monkeypatch.setenv("OP_OBSERVE_DISABLE_LIST", "torch.Tensor.mul")
    assert _observed_names(tmp_path, ops="torch.Tensor.mul,torch.Tensor.sub") == ["torch.Tensor.sub"]
    assert _observed_names(tmp_path, ops="torch.Tensor.mul", disable_ops="") == ["torch.Tensor.mul"]


def test_bad_regex_in_env_raises_naming_variable_and_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_LIST", "torch.Tensor.add,torch.(")
    with pytest.raises(ValueError, match=r"OP_OBSERVE_LIST.*'torch\.\('"):
        OpObserve(device="cpu")


def test_bad_regex_in_disable_env_names_disable_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_OBSERVE_DISABLE_LIST", "[abc")
    with pytest.raises(ValueError, match=r"OP_OBSERVE_DISABLE_LIST.*'\[abc'"):
        OpObserve(device="cpu")


# -- 5. verbose ----------------------------------------------------------------------------------------
def _check_table(text: str) -> None:
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("OpObserve: torch.Tensor.add"))
    assert " step " in lines[head] and " at " in lines[head]
    header = lines[head + 1].split()
    assert header[:5] == ["name", "kind", "dtype/value", "shape", "stride"]
    assert "device" in header and "requires_grad" in header
    body = []
    for ln in lines[head + 2:]:
        if not ln.startswith("  "):
            break
        body.append(ln.split())
    rows = {cells[0]: cells for cells in body}
    assert rows["args[0]"][1:6] == ["tensor", "float32", "[2,", "3]", "[3,"]
    assert rows["args[1]"][:3] == ["args[1]", "tensor", "float32"]
    assert rows["output"][1:2] == ["tensor"]
    assert "cpu" in rows["output"]


def test_verbose_prints_a_table_per_call(tmp_path: Path) -> None:
    out = tmp_path / "verbose.txt"
    a, b = torch.ones(2, 3), torch.ones(2, 3)
    with OpObserve(device="cpu", file=out, verbose=True, backward=False) as obs:
        torch.Tensor.add(a, b, alpha=2)
    text = out.read_text(encoding="utf-8")
    _check_table(text)
    assert re.search(r"^\s+alpha\s+int\s+2\s*$", text, re.MULTILINE), text
    assert obs.lines == len(text.splitlines()) == 6


def test_verbose_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_TOOLS_VERBOSE", "1")
    out = tmp_path / "verbose.txt"
    with OpObserve(device="cpu", file=out, backward=False):
        torch.ones(2, 3).add(torch.ones(2, 3))
    _check_table(out.read_text(encoding="utf-8"))


def test_file_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "env.txt"
    monkeypatch.setenv("OP_OBSERVE_FILE", str(out))
    with OpObserve(device="cpu"):
        torch.ones(2).neg()
    assert _forward_names(_lines(out)) == ["torch.ones", "torch.Tensor.neg"]  # factories are ops too


# -- 6. stderr and counters ----------------------------------------------------------------------------
def test_stderr_by_default_and_counters_match(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(4, 3, requires_grad=True)
    with OpObserve(device="cpu") as obs:
        y = torch.relu(x)
        z = y.exp()
        z.mean().backward()
    captured = capsys.readouterr()
    assert "OpObserve" not in captured.out
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("OpObserve: ")]
    forward = [ln for ln in lines if " backward (" not in ln]
    backward = [ln for ln in lines if " backward (" in ln]
    assert _forward_names(forward) == ["torch.relu", "torch.Tensor.exp", "torch.Tensor.mean"]
    assert sorted(ln.split()[1] for ln in backward) == sorted(_forward_names(forward))
    assert obs.observed == len(forward) == 3
    assert obs.backward_observed == len(backward) == 3
    assert obs.lines == len(lines) == 6


def test_backward_false_prints_no_backward_lines(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(3, requires_grad=True)
    with OpObserve(device="cpu", backward=False) as obs:
        x.exp().sum().backward()
    err = capsys.readouterr().err
    assert " backward (" not in err
    assert obs.observed == 2 and obs.backward_observed == 0 and obs.lines == 2


# -- 7. nesting and lifecycle --------------------------------------------------------------------------
def test_tools_nest_and_both_record(tmp_path: Path) -> None:
    a_file, b_file = tmp_path / "a.txt", tmp_path / "b.txt"
    x = torch.ones(3)
    with OpObserve(device="cpu", file=a_file) as outer:
        x.neg()
        with OpObserve(device="cpu", file=b_file) as inner:
            x.exp()
        x.abs()
    assert _forward_names(_lines(a_file)) == ["torch.Tensor.neg", "torch.Tensor.exp", "torch.Tensor.abs"]
    assert _forward_names(_lines(b_file)) == ["torch.Tensor.exp"]
    exp_a = [ln for ln in _lines(a_file) if "torch.Tensor.exp" in ln]
    assert exp_a == [ln for ln in _lines(b_file)]
    assert (outer.observed, inner.observed) == (3, 1)
    assert engine.tools == []


def test_start_stop_idempotent_and_nothing_after_stop(tmp_path: Path) -> None:
    out = tmp_path / "observe.txt"
    x = torch.ones(3)
    obs = OpObserve(device="cpu", file=out)
    assert obs.start() is obs
    obs.start()
    x.neg()
    assert engine.tools == [obs]
    obs.stop()
    obs.stop()
    assert not obs.active and engine.tools == []
    x.exp()
    assert obs.observed == 1
    assert _forward_names(_lines(out)) == ["torch.Tensor.neg"]
    obs.start()  # a restart appends to the same file
    x.abs()
    obs.stop()
    assert _forward_names(_lines(out)) == ["torch.Tensor.neg", "torch.Tensor.abs"]


# -- 8. results unchanged ------------------------------------------------------------------------------
def _train(device: str, observe: OpObserve | None) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(5, 6).to(device)
    target = torch.randn(5, 2).to(device)
    losses = []
    if observe is not None:
        observe.start()
    try:
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(data), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        if observe is not None:
            observe.stop()
    return losses


@pytest.mark.parametrize("device", ["cpu", "dipu"])
def test_observing_leaves_training_bitwise_unchanged(device: str, tmp_path: Path) -> None:
    if device == "dipu":
        import torch_dipu  # noqa: F401
    plain = _train(device, None)
    obs = OpObserve(device=device, file=tmp_path / "train.txt")
    observed = _train(device, obs)
    assert observed == plain
    assert obs.observed > 0 and obs.backward_observed > 0
    names = set(_forward_names(_lines(tmp_path / "train.txt")))
    assert {"torch.nn.functional.linear", "torch.nn.functional.mse_loss"} <= names
    assert all(f" on {device}" in ln for ln in _lines(tmp_path / "train.txt") if " backward (" not in ln)


# -- 9. a failing tool ---------------------------------------------------------------------------------
def test_failing_tool_does_not_break_ops_and_warns_once_per_op(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: OpObserve, call: object, state: object, output: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(OpObserve, "after", broken)
    monkeypatch.setattr(protocol, "_reported", set())
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with OpObserve(device="cpu", backward=False):
            first = a.add(b)
            second = a.add(b)
            product = a.mul(b)
    assert torch.equal(first, torch.tensor([4.0, 6.0]))
    assert torch.equal(second, first)
    assert torch.equal(product, torch.tensor([3.0, 8.0]))
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 2, [str(w.message) for w in runtime]
    messages = sorted(str(w.message) for w in runtime)
    assert "torch.Tensor.add" in messages[0] and "boom" in messages[0]
    assert "torch.Tensor.mul" in messages[1]
    assert all("OpObserve failed" in m and "unchanged" in m for m in messages)


def test_failing_tool_warns_with_pytest_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: OpObserve, call: object, state: object, output: object) -> None:
        raise KeyError("oops")

    monkeypatch.setattr(OpObserve, "after", broken)
    monkeypatch.setattr(protocol, "_reported", set())
    with pytest.warns(RuntimeWarning, match=r"OpObserve failed in after the call of torch\.Tensor\.neg") as rec:
        ones = torch.ones(2)
        with OpObserve(device="cpu", backward=False):
            out = [ones.neg() for _ in range(3)]
    assert all(torch.equal(o, -torch.ones(2)) for o in out)
    assert len([w for w in rec if issubclass(w.category, RuntimeWarning)]) == 1
