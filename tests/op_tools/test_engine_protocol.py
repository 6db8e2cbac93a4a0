"""The engine protocol: declared phases only, how a call ran passed by the engine, plans resolved once per
(op name, step), and one backward mechanism for every tool (OpTimeMeasure included)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi import steps
from op_tools import OpFallback, OpTimeMeasure, autograd_hooks
from op_tools.engine import engine
from op_tools.protocol import Phase, Ran
from op_tools.tool import OpTool


@pytest.fixture(autouse=True)
def _no_tools_left():
    yield
    for tool in list(engine.tools):
        tool.stop()


class Seen(OpTool):
    """Records every phase the engine hands it, and how each call ran."""

    env_prefix = "OP_SEEN"
    phases = Phase.BEFORE | Phase.AFTER | Phase.BACKWARD

    def __init__(self, sit_out: str | None = None, **kwargs) -> None:
        super().__init__(device="dipu", **kwargs)
        self.sit_out = sit_out
        self.events: list[tuple[str, str, Ran]] = []

    def before(self, call):
        self.events.append(("before", call.name, call.ran))
        return None if call.name == self.sit_out else "state"

    def after(self, call, state, output):
        assert state == "state"
        self.events.append(("after", call.name, call.ran))

    def on_backward(self, call, state, grad_inputs, grad_outputs):
        self.events.append(("backward", call.name, call.ran))


class AfterOnly(Seen):
    """Defines ``before`` but declares only ``after``: the engine must not call ``before``."""

    phases = Phase.AFTER

    def after(self, call, state, output):
        assert state is None
        self.events.append(("after", call.name, call.ran))


def test_the_engine_says_how_each_call_ran() -> None:
    x = torch.ones(3, device="dipu")
    with Seen() as seen:
        y = torch.zeros(3, device="dipu")  # no device input: it runs before the tools
        torch.add(x, y)
    assert seen.events == [
        ("before", "torch.zeros", Ran.BEFORE_TOOLS), ("after", "torch.zeros", Ran.BEFORE_TOOLS),
        ("before", "torch.add", Ran.PENDING), ("after", "torch.add", Ran.NORMALLY),
    ]


def test_a_call_run_by_a_tool_is_marked_so(tmp_path) -> None:
    x = torch.ones(3, device="dipu")
    with Seen() as seen, OpFallback(ops="torch.mul", device="dipu", results_dir=tmp_path):
        torch.mul(x, x)
    assert ("after", "torch.mul", Ran.BY_TOOL) in seen.events


def test_only_declared_phases_are_called() -> None:
    x = torch.ones(3, device="dipu", requires_grad=True)
    with AfterOnly() as tool:
        (x * 2).sum().backward()
    assert [e[0] for e in tool.events] == ["after", "after"]  # mul and sum; no before, no backward


def test_none_from_before_sits_the_call_out() -> None:
    x = torch.ones(3, device="dipu", requires_grad=True)
    with Seen(sit_out="torch.Tensor.mul") as seen:
        (x * 2).sum().backward()
    names = [(phase, name) for phase, name, _ in seen.events]
    assert ("before", "torch.Tensor.mul") in names
    assert ("after", "torch.Tensor.mul") not in names and ("backward", "torch.Tensor.mul") not in names
    assert ("after", "torch.Tensor.sum") in names and ("backward", "torch.Tensor.sum") in names


def test_phases_are_inferred_for_tools_that_declare_none() -> None:
    class Legacy(OpTool):
        wants_backward = True

        def after(self, call, state, output):
            pass

    class Runner(OpTool):
        executes = True

        def before(self, call):
            return True

    assert Legacy.phases == Phase.AFTER | Phase.BACKWARD
    assert Runner.phases == Phase.BEFORE | Phase.EXECUTE


def test_acting_tools_are_resolved_once_per_op_name_and_step(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int]] = []
    original = Seen.acts_on

    def counting(self, name):
        asked.append((name, steps.current_step()))
        return original(self, name)

    monkeypatch.setattr(Seen, "acts_on", counting)
    x = torch.ones(3, device="dipu")
    with Seen() as seen:
        for _ in range(5):
            torch.add(x, x)
        step = steps.next_step()
        for _ in range(5):
            torch.add(x, x)
    assert asked == [("torch.add", step - 1), ("torch.add", step)]
    assert sum(1 for e in seen.events if e[0] == "after") == 10


def test_a_step_range_still_applies_with_resolved_plans() -> None:
    x = torch.ones(3, device="dipu")
    first = steps.current_step()
    with Seen(steps=f"{first + 1}-{first + 1}") as seen:
        torch.add(x, x)  # step `first`: not acting
        steps.next_step()
        torch.add(x, x)  # acting
        steps.next_step()
        torch.add(x, x)  # not acting
    assert [e[0] for e in seen.events] == ["before", "after"]


def test_time_measure_times_the_backward_through_the_one_hook_mechanism(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path) -> None:
    attached: list[tuple[str, list[str]]] = []
    original = autograd_hooks.attach

    def spy(call, states, edges, seq0, seq1, plan=None):
        attached.append((call.name, [type(t).__name__ for t, _ in states]))
        return original(call, states, edges, seq0, seq1, plan)

    monkeypatch.setattr(autograd_hooks, "attach", spy)
    x = torch.randn(4, 8, device="dipu", requires_grad=True)
    w = torch.randn(5, 8, device="dipu", requires_grad=True)
    with OpTimeMeasure(device="dipu", mode="sync", results_dir=tmp_path, collectives=False) as timer:
        F.linear(x, w).sum().backward()
    assert ("torch.nn.functional.linear", ["OpTimeMeasure"]) in attached
    rows = {(r["name"], r["phase"]) for r in timer.results}
    assert ("torch.nn.functional.linear", "backward") in rows and ("torch.Tensor.sum", "backward") in rows
    assert x.grad is not None and torch.allclose(x.grad.cpu(), w.detach().cpu().sum(0).expand(4, 8))
