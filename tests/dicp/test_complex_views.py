"""Complex values under ``torch.compile(backend="onnxgraph")``: a Meta-Llama rotary embedding (``polar``,
``view_as_complex``, complex ``mul``, ``view_as_real``) trains through AOTAutograd with every node of the forward
and backward graphs in vendor islands (complex values are float pairs inside the ONNX graph), and its outputs and
gradients equal eager's."""

from __future__ import annotations

import copy

import pytest
import torch

from diopi.compare import all_passed, compare_outputs

pytest.importorskip("onnxruntime")


def _rope(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Meta Llama's ``apply_rotary_emb`` for one tensor: ``x`` (B, S, H, D), ``freqs_cis`` (S, D // 2) complex."""
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    freqs = freqs_cis.view(1, x_.shape[1], 1, x_.shape[-1])
    return torch.view_as_real(x_ * freqs).flatten(3).type_as(x)


class Rotary(torch.nn.Module):
    """A Linear projection to heads, rotary embedding of q and k with frequencies made by ``polar`` from learned
    angles inside the graph, then a score reduction."""

    def __init__(self, dim: int = 16, heads: int = 2, seq: int = 6) -> None:
        super().__init__()
        self.heads = heads
        self.proj = torch.nn.Linear(dim, 2 * dim)
        base = torch.outer(torch.arange(seq, dtype=torch.float32),
                           1.0 / 10000 ** (torch.arange(0, dim // heads, 2).float() / (dim // heads)))
        self.angles = torch.nn.Parameter(base)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k = self.proj(x).view(b, s, 2 * self.heads, -1).chunk(2, dim=2)
        angles = self.angles[:s]
        freqs_cis = torch.polar(torch.ones_like(angles), angles)
        q, k = _rope(q, freqs_cis), _rope(k, freqs_cis)
        return (q * k).sum(-1)


def _report() -> dict:
    from dicp.dynamo_bridge.report import compile_report

    return compile_report().get("onnxgraph", {})


def _train_like_eager(model: torch.nn.Module, inputs: list[tuple], dynamic: bool = False) -> None:
    """``model`` compiled with onnxgraph and an eager copy take one step per argument tuple of ``inputs``
    (loss: the sum of squared outputs); outputs and every parameter's gradient must equal eager's."""
    eager_model = copy.deepcopy(model)
    compiled = torch.compile(model, backend="onnxgraph", dynamic=dynamic)
    for args in inputs:
        out, expected = compiled(*args), eager_model(*args)
        out.square().sum().backward()
        expected.square().sum().backward()
        results = compare_outputs([out.detach(), *(p.grad for p in model.parameters())],
                                  [expected.detach(), *(p.grad for p in eager_model.parameters())])
        assert all_passed(results), [r.message for r in results if r.message]
        model.zero_grad()
        eager_model.zero_grad()


def test_meta_llama_rotary_trains_without_eager_island(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DICP_CACHE", "0")
    from dicp.config import reset_config

    reset_config()
    torch.manual_seed(0)
    _train_like_eager(Rotary(), [(torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(step)),)
                                 for step in range(2)])
    report = _report()
    assert report.get("graphs_forward", 0) == 1 and report.get("graphs_backward", 0) == 1, report
    assert report.get("vendor_islands", 0) == 2, report  # one per graph: nothing split off
    assert report.get("eager_islands", 0) == 0 and report.get("eager_nodes", 0) == 0, report
    assert report.get("eager_ops", {}) == {} and report.get("compile_failures", 0) == 0, report


class BufferRotary(torch.nn.Module):
    """Meta Llama's layout: ``freqs_cis`` a precomputed complex buffer (a complex graph input), sliced at a start
    position for the sequence."""

    def __init__(self, dim: int = 16, heads: int = 2, max_seq: int = 32) -> None:
        super().__init__()
        self.heads = heads
        self.proj = torch.nn.Linear(dim, dim)
        t = torch.outer(torch.arange(max_seq, dtype=torch.float32),
                        1.0 / 10000 ** (torch.arange(0, dim // heads, 2).float() / (dim // heads)))
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(t), t))

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        b, s, _ = x.shape
        return _rope(self.proj(x).view(b, s, self.heads, -1), self.freqs_cis[start:start + s])


def test_complex_buffer_rotary_dynamic_shapes_train_without_eager_island(monkeypatch: pytest.MonkeyPatch) -> None:
    """One dynamic compile serves three sequence lengths: complex island inputs with symbolic sizes."""
    monkeypatch.setenv("DICP_CACHE", "0")
    from dicp.config import reset_config

    reset_config()
    torch.manual_seed(0)
    _train_like_eager(BufferRotary(), [(torch.randn(2, seq, 16, generator=torch.Generator().manual_seed(seq)), 1)
                                       for seq in (5, 7, 9)], dynamic=True)
    report = _report()
    assert report.get("graphs_forward", 0) == 1 and report.get("graphs_backward", 0) == 1, report
    assert report.get("vendor_islands", 0) == 2 and report.get("eager_nodes", 0) == 0, report
    assert report.get("eager_ops", {}) == {} and report.get("guards_added", 0) == 0, report


def _nodes(fn, *args: torch.Tensor) -> list[torch.fx.Node]:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, tracing_mode="fake")(*args)
    return [n for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_unconverted_complex_operator_is_rejected_with_its_reason() -> None:
    """A complex node of an operator with no complex converter stays eager, saying why; the float nodes of the
    operators that have one keep their float converter."""
    from dicp.vendor.onnxgraph import vendor

    conversions = vendor().conversions
    aten = torch.ops.aten
    c = torch.randn(3, dtype=torch.complex64)
    div, exp, add_alpha, mul_c, mul_f = _nodes(
        lambda a, b, x: (aten.div.Tensor(a, b), aten.exp.default(a), aten.add.Tensor(a, b, alpha=1j),
                         aten.mul.Tensor(a, b), aten.mul.Tensor(x, x)), c, c, torch.randn(3))
    assert conversions.unsupported(div) == "aten.div.Tensor: dtype torch.complex64 not supported by onnxgraph"
    assert conversions.unsupported(exp) == "aten.exp.default: dtype torch.complex64 not supported by onnxgraph"
    assert conversions.unsupported(add_alpha) == "aten.add.Tensor: a complex alpha"
    assert conversions.unsupported(mul_c) is None and conversions.unsupported(mul_f) is None
    (half,) = _nodes(lambda x: aten.view_as_complex.default(x), torch.randn(3, 2, dtype=torch.float16))
    assert conversions.unsupported(half) == \
        "aten.view_as_complex.default: dtype torch.complex32 not supported by onnxgraph"
