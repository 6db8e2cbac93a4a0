"""Model tests of the onnxgraph vendor under ``torch.compile``: W1 (a tiny Llama) and a small CNN train with the
losses of eager; a tiny Llama serves two sequence lengths with one dynamic compile, with its fused patterns
lowered to ONNX; ``torch.compile`` with no backend on dipu compiles with onnxgraph.

Each test compiles one model once (the autouse fixture of conftest.py resets dynamo around every test) and
checks everything about it. Losses are judged by ``diopi.compare`` against eager float32, with eager float64
as the reference of the noise rule (float32 noise over three optimizer steps passes, a wrong gradient does not).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from diopi.compare import all_passed, compare_outputs

pytest.importorskip("onnxruntime")
transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import W1  # noqa: E402

STEPS = 3


def _llama(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**W1))


class SmallCNN(torch.nn.Module):
    """conv2d, batchnorm, relu, maxpool, linear (the loss is cross-entropy)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def _train(model: torch.nn.Module, loss_of: Callable[[torch.nn.Module], torch.Tensor]) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(STEPS):
        loss = loss_of(model)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _assert_losses(compiled: list[float], eager: list[float], eager64: list[float]) -> None:
    results = compare_outputs(torch.tensor(compiled), torch.tensor(eager),
                              expected_fp64=torch.tensor(eager64, dtype=torch.float64))
    assert all_passed(results), (compiled, eager, [r.message for r in results])


def _report() -> dict:
    from dicp.dynamo_bridge.report import compile_report

    return compile_report().get("onnxgraph", {})


def _check_training(make: Callable[[], torch.nn.Module], loss_of: Callable[[torch.nn.Module], torch.Tensor],
                    inputs_fp64: Callable[[torch.nn.Module], torch.Tensor]) -> None:
    model = make()
    eager_model, eager64_model = copy.deepcopy(model), copy.deepcopy(model).double()
    compiled = _train(torch.compile(model, backend="onnxgraph"), loss_of)
    eager = _train(eager_model, loss_of)
    eager64 = _train(eager64_model, inputs_fp64)
    _assert_losses(compiled, eager, eager64)
    report = _report()
    assert report.get("graphs_forward", 0) >= 1 and report.get("graphs_backward", 0) >= 1, report
    assert report.get("vendor_islands", 0) >= 2, report
    assert report.get("eager_ops", {}) == {}, report  # a model that gains an eager island fails here


def test_llama_with_attention_dropout_trains_with_one_island_per_graph() -> None:
    """Dropout's draws run eagerly beside the island (dicp.dynamo_bridge.passes.draws_apart), the masks eager's."""
    ids = torch.randint(0, W1["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(0))
    config = transformers.LlamaConfig(**W1, attention_dropout=0.1)
    losses = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).train()
        run = torch.compile(model, backend="onnxgraph") if compiled else model
        torch.manual_seed(1)
        losses.append(_train(run, lambda m: m(input_ids=ids, labels=ids).loss))
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
    report = _report()
    assert report["vendor_islands"] == report["graphs_forward"] + report["graphs_backward"], report
    assert report["eager_ops"] == {"aten.native_dropout.default": 2 * report["graphs_forward"]}, report


def test_w1_trains_like_eager() -> None:
    ids = torch.randint(0, W1["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(0))

    def loss_of(model: torch.nn.Module) -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss

    _check_training(_llama, loss_of, loss_of)


def test_small_cnn_trains_like_eager() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return SmallCNN()

    def loss_of(model: torch.nn.Module) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x), y)

    def loss_of_fp64(model: torch.nn.Module) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x.double()), y)

    _check_training(make, loss_of, loss_of_fp64)


def test_llama_inference_dynamic_fused() -> None:
    """dynamic=True: two sequence lengths, ONE compile; RMSNorm, silu*mul and attention fused and lowered to
    ONNX (the artifacts' nodes are named after the fx node's operator); logits equal eager."""
    import onnx

    from dicp.dynamo_bridge.compile_fx import make_backend
    from dicp.vendor.onnxgraph import vendor
    from dicp.vendor.onnxgraph.fused import FUSED_OPSET

    artifacts: list[bytes] = []
    base = vendor()

    def recording_compile(gm: torch.fx.GraphModule) -> bytes:
        artifact = base.compile(gm)
        artifacts.append(artifact)
        return artifact

    backend = make_backend(dataclasses.replace(base, compile=recording_compile))
    model = _llama().eval()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for seq in (48, 80):
        ids = torch.randint(0, W1["vocab_size"], (2, seq), generator=torch.Generator().manual_seed(seq))
        with torch.no_grad():
            actual = compiled(input_ids=ids, use_cache=False).logits
            expected = model(input_ids=ids, use_cache=False).logits
        results = compare_outputs(actual, expected)
        assert all_passed(results), [r.message for r in results]
    report = _report()
    assert report.get("graphs_inference") == 1, report
    assert report.get("guards_added", 0) == 0 and report.get("eager_ops", {}) == {}, report
    rewrites = report.get("rewrites", {})
    layers = W1["num_hidden_layers"]
    assert rewrites.get("fuse_rms_norm") == 2 * layers + 1, rewrites
    assert rewrites.get("fuse_silu_mul") == layers and rewrites.get("fuse_attention") == layers, rewrites
    models = [onnx.load_from_string(a) for a in artifacts]
    names = " ".join(n.name for m in models for n in m.graph.node)
    for op in ("dicp.rms_norm", "dicp.silu_mul", "dicp.attention"):
        assert op in names, f"{op} not lowered into the ONNX graph"
    if max(m.opset_import[0].version for m in models) >= FUSED_OPSET:
        assert "Attention" in {n.op_type for m in models for n in m.graph.node}


def test_new_lengths_recompile_once() -> None:
    """``torch.compile``'s default (automatic dynamic shapes): the first length compiles static, the second
    recompiles once with a symbolic length, and every later length reuses that graph (no guard of the vendor's
    pins a size); forward and backward alike, losses equal eager's."""
    model = _llama()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="onnxgraph")
    for seq in (16, 24, 40, 56, 72):
        ids = torch.randint(0, W1["vocab_size"], (2, seq), generator=torch.Generator().manual_seed(seq))
        losses = [m(input_ids=ids, labels=ids).loss for m in (compiled, reference)]
        for loss in losses:
            loss.backward()
        assert all_passed(compare_outputs(losses[0].detach(), losses[1].detach()))
    report = _report()
    assert report["graphs_forward"] == 2 and report["graphs_backward"] == 2, report
    assert report["guards_added"] == 0 and report.get("eager_ops", {}) == {}, report
    grads = [p.grad for p in model.parameters()], [p.grad for p in reference.parameters()]
    assert all_passed(compare_outputs(*grads))


def test_default_backend_on_dipu_is_onnxgraph() -> None:
    """``torch.compile(model)`` with no backend: a graph on dipu is compiled by onnxgraph and equals eager CPU."""
    import torch_dipu  # noqa: F401  (the dipu device)
    from torch_dipu import compile_default

    if compile_default.fallback_backend() != "onnxgraph":
        pytest.skip(f"the dipu vendor's compile backend is {compile_default.fallback_backend()!r}")
    model = _llama().eval()
    ids = torch.randint(0, W1["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=False).logits
        before = compile_default.chosen_backends()["onnxgraph"]
        on_dipu = model.to("dipu")
        actual = torch.compile(on_dipu)(input_ids=ids.to("dipu"), use_cache=False).logits
    assert compile_default.chosen_backends()["onnxgraph"] > before
    assert actual.device.type == "dipu"
    assert _report().get("vendor_islands", 0) >= 1
    results = compare_outputs(actual.cpu(), expected)
    assert all_passed(results), [r.message for r in results]
