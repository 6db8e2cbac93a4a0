"""The interception engine: op names, lists, call sites, devices, nesting and backward coverage."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi.steps import StepRange
from op_tools.engine import engine
from op_tools.naming import function_info, resolve_function
from op_tools.op_filter import OpFilter
from op_tools.tool import OpTool


class Recorder(OpTool):
    """A tool that records what the engine hands it."""

    env_prefix = "OP_RECORDER"
    wants_backward = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[str, str, bool]] = []
        self.backward: dict[str, tuple[dict, dict]] = {}

    def before(self, call):
        return call.name

    def after(self, call, state, output):
        self.calls.append((call.name, call.call_site, call.inplace))

    def on_backward(self, call, state, grad_inputs, grad_outputs):
        self.backward[call.name] = (grad_inputs, grad_outputs)


def names(tool: Recorder) -> list[str]:
    return [name for name, _, _ in tool.calls]


@pytest.mark.parametrize(("func", "name"), [
    (torch.Tensor.add, "torch.Tensor.add"),
    (F.linear, "torch.nn.functional.linear"),
    (torch.cat, "torch.cat"),
    (torch._foreach_add_, "torch._foreach_add_"),
    (torch.Tensor.__getitem__, "torch.Tensor.__getitem__"),
    (torch.mm, "torch.mm"),  # torch.overrides.resolve_name says torch.spmm
    (torch.Tensor.mm, "torch.Tensor.mm"),
])
def test_functions_get_the_seeds_names_and_resolve_back(func, name) -> None:
    info = function_info(func)
    assert info.name == name and info.is_op
    assert resolve_function(name) is func


def test_attribute_access_printing_and_backward_are_not_ops() -> None:
    assert not function_info(torch.Tensor.shape.__get__).is_op
    assert not function_info(torch.Tensor.__repr__).is_op
    assert not function_info(torch.Tensor.backward).is_op
    assert function_info(torch.Tensor.add_).inplace and not function_info(torch.Tensor.add).inplace
    assert function_info(torch.Tensor.__iadd__).inplace
    assert function_info(F.dropout).random and function_info(torch.randn).random
    assert not function_info(torch.Tensor.add).random


def test_lists_unset_empty_regex_and_disable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OpFilter("OP_X")("torch.Tensor.add")  # unset: all
    assert not OpFilter("OP_X", ops="")("torch.Tensor.add")  # empty: none
    f = OpFilter("OP_X", ops=r"torch\.Tensor\.(add|mul), torch.cat", disable_ops="torch.Tensor.mul")
    assert f("torch.Tensor.add") and f("torch.cat")
    assert not f("torch.Tensor.mul")  # the disable list wins
    assert not f("torch.Tensor.addmm")  # whole-name match only
    monkeypatch.setenv("OP_X_LIST", "torch.Tensor.sub")
    monkeypatch.setenv("OP_X_DISABLE_LIST", "torch.Tensor.add")
    from_env = OpFilter("OP_X")
    assert from_env("torch.Tensor.sub") and not from_env("torch.Tensor.add") and not from_env("torch.cat")
    assert OpFilter("OP_X", ops="torch.cat")("torch.cat")  # a keyword overrides the environment
    monkeypatch.setenv("OP_X_LIST", "torch.(add")
    with pytest.raises(ValueError, match=r"OP_X_LIST: entry 'torch.\(add'"):
        OpFilter("OP_X")


def test_step_ranges() -> None:
    assert 3 in StepRange("2-4") and 5 not in StepRange("2-4") and 1 not in StepRange("2-4")
    assert 100 in StepRange("5-") and 4 not in StepRange("5-")
    assert 3 in StepRange("3") and 4 not in StepRange("3")
    assert StepRange(None).unbounded
    for bad in ("x", "4-2", "0", "2-3-4"):
        with pytest.raises(ValueError, match="step"):
            StepRange(bad, source="OP_CAPTURE_STEPS")


def test_call_site_is_the_users_line_and_calls_inside_torch_functions_are_not_seen() -> None:
    x = torch.randn(2, 3, 4)
    w = torch.randn(5, 4)
    with Recorder(device="cpu") as rec:
        F.linear(x, w)  # the call site line
        torch.nn.functional.layer_norm(x, (4,))
    assert names(rec) == ["torch.nn.functional.linear", "torch.nn.functional.layer_norm"]
    site = rec.calls[0][1]
    assert site.startswith(f"{__file__}:") and "F.linear(x, w)  # the call site line" in site
    assert "test_call_site_is_the_users_line" in site


def test_tools_act_only_on_their_device() -> None:
    cpu = torch.ones(3)
    with Recorder() as rec:  # the active accelerator: dipu
        cpu + 1
        moved = cpu.to("dipu")
        moved * 2
        torch.ones(2, device="dipu")
    assert names(rec) == ["torch.Tensor.to", "torch.Tensor.mul", "torch.ones"]
    with Recorder(device="cpu") as rec:
        cpu + 1
        moved * 2
    assert names(rec) == ["torch.Tensor.add"]


def test_tools_nest_and_stop_cleanly() -> None:
    x = torch.ones(3)
    outer, inner = Recorder(device="cpu"), Recorder(device="cpu")
    with outer:
        x + 1
        with inner:
            x * 2
        x - 1
    x / 2
    assert names(outer) == ["torch.Tensor.add", "torch.Tensor.mul", "torch.Tensor.sub"]
    assert names(inner) == ["torch.Tensor.mul"]
    assert engine.tools == [] and engine.mode is None
    started = Recorder(device="cpu").start()
    x + 1
    started.stop()
    started.stop()  # idempotent
    x + 1
    assert names(started) == ["torch.Tensor.add"]


def test_inplace_calls_are_marked() -> None:
    x, out = torch.ones(3), torch.empty(3)
    with Recorder(device="cpu") as rec:
        x.add_(1)
        torch.add(x, 1, out=out)
        x + 1
    assert [inplace for _, _, inplace in rec.calls] == [True, True, False]


def test_backward_covers_every_node_of_linear_on_3d_input() -> None:
    """F.linear on 3-D input makes a view, a transpose and a matmul node; the weight's gradient comes from
    the matmul, not from the output's grad_fn. Both input gradients must be recorded, and equal autograd's."""
    x = torch.randn(2, 3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    with Recorder(device="cpu") as rec:
        y = F.linear(x, w)
    grad_y = torch.randn(2, 3, 5)
    y.backward(grad_y)
    grad_inputs, grad_outputs = rec.backward["torch.nn.functional.linear"]
    assert set(grad_inputs) == {0, 1} and set(grad_outputs) == {0}
    assert grad_inputs[0].shape == (2, 3, 4) and grad_inputs[1].shape == (5, 4)
    assert grad_outputs[0].shape == (2, 3, 5)


def test_backward_gives_the_ops_own_contribution_not_the_total_gradient() -> None:
    class Data(Recorder):
        backward_needs = "data"

    x = torch.randn(4, requires_grad=True)
    with Data(device="cpu", ops="torch.Tensor.mul") as rec:
        a = x * 3
        b = x.sin()  # a second consumer of x
    (a + b).sum().backward()
    grad_inputs, grad_outputs = rec.backward["torch.Tensor.mul"]
    torch.testing.assert_close(grad_inputs[0], torch.full((4,), 3.0))  # mul's part only
    assert not torch.equal(grad_inputs[0], x.grad)
    torch.testing.assert_close(grad_outputs[0], torch.ones(4))


def test_backward_of_an_inplace_op_on_a_non_leaf() -> None:
    class Data(Recorder):
        backward_needs = "data"

    x = torch.randn(4, requires_grad=True)
    with Data(device="cpu", ops="torch.Tensor.mul_") as rec:
        y = x * 1.0
        y.mul_(2)
    y.sum().backward()
    grad_inputs, _ = rec.backward["torch.Tensor.mul_"]
    torch.testing.assert_close(grad_inputs[0], torch.full((4,), 2.0))


def test_a_failing_tool_reports_once_and_the_op_result_is_unchanged() -> None:
    class Broken(Recorder):
        def after(self, call, state, output):
            raise RuntimeError("tool bug")

    x = torch.ones(3)
    with pytest.warns(RuntimeWarning, match="Broken failed in after the call of torch.Tensor.add") as record, \
            Broken(device="cpu"):
        results = [x + 1 for _ in range(3)]
    assert len([w for w in record if "torch.Tensor.add" in str(w.message)]) == 1
    assert all(torch.equal(r, torch.full((3,), 2.0)) for r in results)


def test_op_errors_propagate_unchanged() -> None:
    a, b = torch.ones(3), torch.ones(4)
    with Recorder(device="cpu") as rec, pytest.raises(RuntimeError, match="size of tensor a"):
        a + b
    assert rec.calls == []


def test_a_forked_child_does_not_run_the_parents_tools(tmp_path) -> None:
    """DataLoader workers are forked while a tool is active: they have no writer threads and must not
    capture or print on the tool's behalf."""
    import os

    with Recorder(device="cpu") as rec:
        pid = os.fork()
        if pid == 0:  # the child
            torch.ones(3) + 1
            os._exit(0 if rec.calls == [] else 1)
        _, status = os.waitpid(pid, 0)
        torch.ones(3) * 2
    assert os.waitstatus_to_exitcode(status) == 0
    assert names(rec) == ["torch.ones", "torch.Tensor.mul"]
