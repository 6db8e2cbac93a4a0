"""Random draws beside vendor islands (``dicp.dynamo_bridge.passes.draws_apart``): a dropout's draw runs eagerly on
a tensor of ones of its input's shape, so the graph stays one vendor island, and the masks, outputs and gradients
are eager's under the same seed (the same generator, the same draws), on the CPU and on dipu."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_dipu  # noqa: F401  (registers the dipu device)
from dicp.dynamo_bridge import compile_report


def dropouts(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = F.dropout((x @ w).relu(), 0.3, training=True)
    return F.dropout(h * 2, 0.5, training=True).sum(-1)


def shape_only_draws(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = (x @ w).relu()
    return (h * torch.ops.aten.bernoulli.p(h.detach(), 0.4) + torch.rand_like(h) * 2 - torch.randn_like(h)).sum(-1)


@pytest.mark.parametrize("device", ["cpu", "dipu"])
@pytest.mark.parametrize("fn", [dropouts, shape_only_draws])
def test_draws_are_eagers_and_the_graph_is_one_island(fn, device: str) -> None:
    x = torch.randn(4, 8, device=device)
    w = torch.randn(8, 16, device=device, requires_grad=True)
    results = []
    for run in (fn, torch.compile(fn, backend="onnxgraph")):
        torch.manual_seed(7)
        out = run(x, w)
        out.sum().backward()
        results.append((out.detach(), w.grad, torch.rand(3, device=device)))  # the stream after the step
        w.grad = None
    (eager_out, eager_grad, eager_next), (out, grad, after) = results
    assert torch.equal(after, eager_next)  # the compiled step drew exactly what eager drew
    torch.testing.assert_close(out, eager_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, eager_grad, rtol=1e-5, atol=1e-5)
    if device == "dipu" and fn is dropouts:  # droplet's kernels are the CPU reference's: x * mask * scale bitwise
        assert torch.equal(out, eager_out) and torch.equal(grad, eager_grad)
    report = compile_report()["onnxgraph"]
    assert report["vendor_islands"] == report["graphs_forward"] + report["graphs_backward"] == 2
    assert set(report["eager_ops"]) <= {"aten.native_dropout.default", "aten.bernoulli.p", "aten.rand_like.default",
                                        "aten.randn_like.default"}



def test_report_lists_each_graphs_islands_and_causes(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``DICP_REPORT=1``: one headline per compiled graph, then each eager island's nodes with their reasons."""
    from dicp.config import reset_config

    monkeypatch.setenv("DICP_REPORT", "1")
    reset_config()
    x, w = torch.randn(4, 8), torch.randn(8, 16, requires_grad=True)
    torch.compile(dropouts, backend="onnxgraph")(x, w).sum().backward()
    lines = [line for line in capsys.readouterr().err.splitlines() if " graph: " in line or "eager island " in line]
    assert lines[0] == "dicp onnxgraph: forward graph: 1 vendor island(s) (nodes: 10), 2 eager island(s)"
    assert len([line for line in lines[1:3] if line.startswith("  eager island ")
                and "aten.native_dropout.default is random" in line]) == 2
    assert lines[3].startswith("dicp onnxgraph: backward graph: 1 vendor island(s)")
    assert lines[3].endswith(", 0 eager island(s)") and len(lines) == 4
