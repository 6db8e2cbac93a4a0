"""The onnxgraph vendor's codegen and runtime: session options, half-precision inputs, dipu inputs, failures
that name the node and operator, the shape check."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from onnx_island import trace_island

from diopi.compare import all_passed, compare_outputs

pytest.importorskip("onnxruntime")

from dicp.config import reset_config  # noqa: E402
from dicp.dynamo_bridge.conversion import ConversionRegistry  # noqa: E402
from dicp.vendor.onnxgraph import vendor  # noqa: E402
from dicp.vendor.onnxgraph.codegen import DEFAULT_OPSET, ConversionError, compile_island  # noqa: E402
from dicp.vendor.onnxgraph.runtime import OrtCompileError, check_shapes, load, session_options, versions  # noqa: E402

aten = torch.ops.aten


def _model(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = torch.softmax(x @ w, -1)
    return torch.nn.functional.gelu(h) * 2, h.sum(0)


def _assert_close(actual: Any, expected: Any, expected_fp64: Any = None) -> None:
    results = compare_outputs(actual, expected, expected_fp64=expected_fp64)
    assert all_passed(results), "; ".join(r.message for r in results)


def test_session_options_threads_and_no_spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DICP_ORT_THREADS", "3")
    reset_config()
    options = session_options()
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    monkeypatch.delenv("DICP_ORT_THREADS")
    reset_config()
    assert session_options().intra_op_num_threads == torch.get_num_threads()
    monkeypatch.setenv("DICP_ORT_SPIN", "1")  # opt-in: pure inference graphs gain, mixed workloads lose
    reset_config()
    assert session_options().get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_versions() -> None:
    got = versions()
    assert set(got) == {"onnx", "onnxruntime", "opset", "codegen"} and got["opset"] == str(DEFAULT_OPSET)
    assert DEFAULT_OPSET >= 18
    # the code generator's source is in the key: an artifact the old codegen built is never reused
    assert re.fullmatch(r"[0-9a-f]{16}", got["codegen"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_inputs_cast_around_compute(dtype: torch.dtype) -> None:
    v = vendor()
    torch.manual_seed(0)
    x, w = torch.randn(4, 8, dtype=dtype), torch.randn(8, 5, dtype=dtype)
    island = trace_island(_model, [x, w], False, v.decompositions)
    out = v.load(v.compile(island.gm), island.gm)(*island.inputs(x, w))
    assert [t.dtype for t in out] == [dtype, dtype]
    expected_fp64 = list(_model(x.double(), w.double()))
    _assert_close(out, list(_model(x, w)), expected_fp64)


def _mixed(x: torch.Tensor, b: torch.Tensor, e: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x.where(b, x * 2), e + 1, h * 3, b.logical_not(), x[:, 0] * x.shape[0])


def test_runner_feeds_every_kind_of_input() -> None:
    """Inputs wrapped by pointer (float32, bool), through DLPack (bfloat16), empty ones and symbolic sizes; bool,
    empty and bfloat16 outputs; every output a tensor of its own, equal to eager's."""
    v = vendor()
    torch.manual_seed(0)
    args = [torch.randn(3, 4), torch.rand(3, 4) > 0.5, torch.empty(0, 4, dtype=torch.bfloat16),
            torch.randn(2, 4, dtype=torch.bfloat16)]
    island = trace_island(_mixed, args, True, v.decompositions)
    assert any(isinstance(n.meta.get("val"), torch.SymInt) for n in island.gm.graph.nodes if n.op == "placeholder")
    runner = v.load(v.compile(island.gm), island.gm)
    for _ in range(2):  # a second call reuses nothing of the first's outputs
        out = runner(*island.inputs(*args))
        want = _mixed(*args)
        assert [(t.dtype, t.shape) for t in out] == [(t.dtype, t.shape) for t in want]
        assert all(torch.equal(o, w) for o, w in zip(out, want, strict=True))
    assert len({t.data_ptr() for t in out if t.numel()}) == sum(1 for t in out if t.numel())


def test_half_cast_inside_graph_rounds() -> None:
    """A float32 -> float16 cast in the graph rounds like eager even though float16 is computed in float32."""
    v = vendor()
    x = torch.tensor([1.0001, 2049.0, 1e-8])
    fn = lambda t: aten._to_copy.default(t, dtype=torch.float16).to(torch.float32) * 1  # noqa: E731
    island = trace_island(fn, [x], False, v.decompositions)
    out = v.load(v.compile(island.gm), island.gm)(x)
    assert torch.equal(out[0], fn(x))


@pytest.mark.parametrize("host_storage", [True, False], ids=["host_storage", "copy"])
def test_dipu_round_trip(host_storage: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    torch_dipu = pytest.importorskip("torch_dipu")
    monkeypatch.setattr(type(torch_dipu.runtime()), "host_storage", host_storage)
    v = vendor()
    torch.manual_seed(0)
    x_cpu, w_cpu = torch.randn(6, 4), torch.randn(5, 4)
    x, w = x_cpu.to("dipu"), w_cpu.to("dipu").t()  # a non-contiguous dipu input
    island = trace_island(_model, [x, w], True, v.decompositions)
    runner = v.load(v.compile(island.gm), island.gm)
    copies: list[torch.Tensor] = []
    real_cpu = torch_dipu.tensor.DipuTensor.cpu
    with monkeypatch.context() as patch:
        patch.setattr(torch_dipu.tensor.DipuTensor, "cpu", lambda t, *a, **k: copies.append(t) or real_cpu(t, *a, **k))
        out = runner(*island.inputs(x, w))
    assert len(copies) == (0 if host_storage else 2)  # host storage: the runner reads the dipu memory in place
    assert all(t.device.type == "dipu" for t in out)
    _assert_close([t.cpu() for t in out], list(_model(x_cpu, w_cpu.t())))


def _relu_island() -> Any:
    return trace_island(lambda x: aten.relu.default(x) + 1, [torch.randn(3, 4)], False)


def test_ort_failure_names_node_and_op() -> None:
    registry = ConversionRegistry("broken")
    registry.register(aten.relu.default)(lambda ctx, x: ctx.emit("Transpose", [x], perm=[0, 5]))
    registry.register(aten.add.Tensor)(lambda ctx, a, b: ctx.emit("Add", [a, ctx.const(b, torch.float32)]))
    island = _relu_island()
    artifact = compile_island(island.gm, registry)
    with pytest.raises(OrtCompileError, match=r"node relu \(aten\.relu\.default\)"):
        load(artifact, island.gm)


def test_converter_error_names_node_and_op() -> None:
    registry = ConversionRegistry("broken")

    def bad(ctx: Any, x: str) -> str:
        raise ValueError("cannot convert this")

    registry.register(aten.relu.default)(bad)
    with pytest.raises(ConversionError, match=r"node relu \(aten\.relu\.default\).*cannot convert this"):
        compile_island(_relu_island().gm, registry)


def test_unconverted_op_is_named() -> None:
    with pytest.raises(ConversionError, match=r"node relu: no conversion for aten\.relu\.default"):
        compile_island(_relu_island().gm, ConversionRegistry("empty"))


def test_check_shapes_agrees_and_catches_a_wrong_rank() -> None:
    v = vendor()
    island = _relu_island()
    assert check_shapes(v.compile(island.gm), island.gm) == []
    registry = ConversionRegistry("wrong")
    registry.register(aten.relu.default)(lambda ctx, x: ctx.emit("ReduceSum", [x], keepdims=0))
    registry.register(aten.add.Tensor)(lambda ctx, a, b: ctx.emit("Add", [a, ctx.const(b, torch.float32)]))
    problems = check_shapes(compile_island(island.gm, registry), island.gm)
    assert problems and any("rank 0 != 2" in p for p in problems), problems


def test_unsupported_dtype_is_rejected_with_a_reason() -> None:
    island = trace_island(lambda x: aten.abs.default(x), [torch.randn(3, dtype=torch.complex64)], False)
    node = next(n for n in island.gm.graph.nodes if n.op == "call_function")
    assert "dtype torch.complex64" in vendor().conversions.unsupported(node)
    island = trace_island(lambda x: aten.erf.default(x), [torch.randn(3, dtype=torch.float64)], False)
    node = next(n for n in island.gm.graph.nodes if n.op == "call_function")
    assert "no double Erf kernel" in vendor().conversions.unsupported(node)


def test_codegen_under_fake_mode() -> None:
    """The bridge may compile inside AOTAutograd's fake mode: converters make no fake constants."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fn(g: torch.Tensor, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        grad = aten.avg_pool2d_backward.default(g, x, [2, 2], [2, 2], [0, 0], False, True, None)
        return aten.mul.Tensor(grad, aten.lt.Tensor(x, i))

    args = [torch.randn(1, 2, 2, 2), torch.randn(1, 2, 4, 4), torch.randint(-1, 2, (4,))]
    v = vendor()
    island = trace_island(fn, args, False, v.decompositions)
    with FakeTensorMode():
        artifact = v.compile(island.gm)
    _assert_close(v.load(artifact, island.gm)(*args), [fn(*args)])


@pytest.mark.parametrize("exponent", [1, 2, 3, -1, -2, -0.5, 1.0, 2.0])
def test_pow_by_a_small_constant_is_eagers_product(exponent: float) -> None:
    """``x ** c`` for the exponents eager's kernel computes as products, roots and reciprocals: eager's bits, and
    no ONNX ``Pow`` (slow on ONNX Runtime's CPU provider)."""
    import onnx

    v = vendor()
    x = torch.rand(64) * 3 + 0.1
    fn = lambda t: aten.pow.Tensor_Scalar(t, exponent)  # noqa: E731
    island = trace_island(fn, [x], False, v.decompositions)
    artifact = v.compile(island.gm)
    assert "Pow" not in {n.op_type for n in onnx.load_from_string(artifact).graph.node}
    assert torch.equal(v.load(artifact, island.gm)(x)[0], fn(x))
