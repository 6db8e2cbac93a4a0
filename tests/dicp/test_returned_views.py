"""A graph that returns a view of its input (``expand``, ``t``, a chain of views): AOTAutograd rebuilds such an
output from the input by the strides the compiled graph returns (with dynamic shapes), so the view stays
PyTorch's own and the output is the same view as in eager, static or dynamic, on the CPU and on dipu."""

from __future__ import annotations

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from dicp.dynamo_bridge import compile_report


class Expand(torch.nn.Module):  # upstream DICP's op test: aten.expand with its sizes as an argument
    def forward(self, a: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
        return torch.ops.aten.expand.default(a, sizes)


class Chain(torch.nn.Module):
    def forward(self, a: torch.Tensor, sizes: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        return a.unsqueeze(0).expand(sizes[0], *a.shape).transpose(1, 2), (a * 2).t()


@pytest.mark.parametrize("device", ["cpu", "dipu"])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("model", [Expand(), Chain()], ids=["expand", "chain"])
def test_a_returned_view_of_an_input_is_the_eager_view(model: torch.nn.Module, dynamic: bool, device: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    compiled = torch.compile(model, backend="onnxgraph", dynamic=dynamic)
    shapes = [((3, 1), (3, 4)), ((3, 1), (3, 5)), ((5, 1), (5, 3))] if isinstance(model, Expand) else \
        [((3, 2), (4,)), ((5, 2), (2,))]
    for shape, sizes in shapes:
        a = torch.randn(*shape, device=device)
        got, want = compiled(a, sizes), model(a, sizes)
        for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want)), strict=True):
            assert g.shape == w.shape and torch.equal(g.cpu(), w.cpu())
        first = got[0] if isinstance(got, tuple) else got  # the view of the input: eager's strides and storage
        view = want[0] if isinstance(want, tuple) else want
        assert first.stride() == view.stride() and first.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
        a.add_(1)  # still a view of the input, as in eager
        assert torch.equal(first.cpu(), (model(a, sizes)[0] if isinstance(got, tuple) else model(a, sizes)).cpu())
    report = compile_report()["onnxgraph"]  # the returned views are PyTorch's views: no eager op, no report line
    assert report["returned_views"] >= 1 and report["eager_ops"] == {} and report["eager_islands"] == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("dicp onnxgraph:")]
