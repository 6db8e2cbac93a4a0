"""dicp's fused operators and pattern rewrites (dicp.dynamo_bridge.fusion) and their ONNX lowering
(dicp.vendor.onnxgraph.fused), on graphs traced with make_fx (no dynamo: fast)."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from dicp.dynamo_bridge import fusion
from diopi.compare import all_passed, compare_outputs

dicp_ops = torch.ops.dicp
F = torch.nn.functional


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # transformers' LlamaRMSNorm, verbatim
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(dtype)


def _silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def _attn_causal_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)


def _attn_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:  # transformers' rotate_half, verbatim
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """transformers' Llama rotary embedding: ``emb = cat(freqs, freqs)`` (equal halves), cos/sin over heads."""
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * 1.0).unsqueeze(1), (emb.sin() * 1.0).unsqueeze(1)
    return x * cos + _rotate_half(x) * sin


def _repeat_kv(t: torch.Tensor, n: int) -> torch.Tensor:  # transformers' repeat_kv, verbatim
    b, h, s, d = t.shape
    return t[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def _attn_repeat_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, _repeat_kv(k, 2), _repeat_kv(v, 2), is_causal=True)


def _inputs(name: str, dtype: torch.dtype = torch.float32, seq: int = 6) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    if name == "rms":
        return r(2, seq, 16), r(16)
    if name == "silu_mul":
        return r(2, seq, 8), r(2, seq, 8)
    if name == "rotary":
        return r(2, 4, seq, 8), r(1, seq, 4)
    if name in ("attn_causal_gqa", "attn_repeat_kv"):
        return r(2, 4, seq, 8), r(2, 2, seq, 8), r(2, 2, seq, 8)
    mask = torch.rand(seq, seq, generator=g) > 0.3
    mask.fill_diagonal_(True)
    return r(2, 2, seq, 8), r(2, 2, seq, 8), r(2, 2, seq, 8), mask


CASES = {  # name -> (function, pass, fused op)
    "rms": (_rms, fusion.fuse_rms_norm, dicp_ops.rms_norm.default),
    "silu_mul": (_silu_mul, fusion.fuse_silu_mul, dicp_ops.silu_mul.default),
    "attn_causal_gqa": (_attn_causal_gqa, fusion.fuse_attention, dicp_ops.attention.default),
    "attn_mask": (_attn_mask, fusion.fuse_attention, dicp_ops.attention.default),
    "rotary": (_rotary, fusion.fuse_rotary, dicp_ops.rotary.default),
    "attn_repeat_kv": (_attn_repeat_kv, fusion.fuse_attention, dicp_ops.attention.default),
}


def _targets(gm: torch.fx.GraphModule) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _check(actual: object, expected: object) -> None:
    results = compare_outputs(actual, expected)
    assert all_passed(results), [r.message for r in results]


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
@pytest.mark.parametrize("name", list(CASES))
def test_pattern_rewritten_and_equal(name: str, mode: str) -> None:
    fn, graph_pass, fused = CASES[name]
    inputs = _inputs(name)
    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    assert graph_pass(gm) == 1
    assert fused in _targets(gm)
    if name == "rms":  # every node of the pattern went, casts included
        assert not _targets(gm) & {torch.ops.aten.rsqrt.default, torch.ops.aten.pow.Tensor_Scalar}
    if name == "rotary":  # rotate_half went: no neg, one cat left (cos/sin's)
        assert torch.ops.aten.neg.default not in _targets(gm)
        assert sum(n.target is torch.ops.aten.cat.default for n in gm.graph.nodes) == 1
    if name == "attn_repeat_kv":  # the attention takes the 2 key/value heads directly
        assert torch.ops.aten.expand.default not in _targets(gm)
        node = next(n for n in gm.graph.nodes if n.target is dicp_ops.attention.default)
        assert [a.op for a in node.args[:3]] == ["placeholder"] * 3
    for seq in (6, 9) if mode == "symbolic" else (6,):
        inputs = _inputs(name, seq=seq)
        _check(gm(*inputs), fn(*inputs))


def test_rms_norm_half_precision_round_trip() -> None:
    """float16 x: the float32 casts in and out belong to the match; the result stays float16."""
    x, w = _inputs("rms", torch.float16)
    gm = make_fx(_rms, tracing_mode="fake")(x, w)
    assert fusion.fuse_rms_norm(gm) == 1
    node = next(n for n in gm.graph.nodes if n.target is dicp_ops.rms_norm.default)
    assert node.args[0].op == "placeholder" and node.meta["val"].dtype == torch.float16
    _check(gm(x, w), _rms(x, w))


def test_inner_value_used_elsewhere_is_not_fused() -> None:
    """A training forward saves inner values for backward: such a match must be left alone."""

    def rms_saving_rsqrt(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return w * (x * r), r

    def silu_twice(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = F.silu(a)
        return s * b, s

    x, w = _inputs("rms")
    assert fusion.fuse_rms_norm(make_fx(rms_saving_rsqrt, tracing_mode="fake")(x, w)) == 0
    assert fusion.fuse_silu_mul(make_fx(silu_twice, tracing_mode="fake")(*_inputs("silu_mul"))) == 0

    def attn_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
        return out[0], out[1]

    gm = make_fx(attn_with_lse, tracing_mode="fake")(*_inputs("attn_mask")[:3])
    assert fusion.fuse_attention(gm) == 0
    assert operator.getitem in _targets(gm)


def test_other_forms_not_fused() -> None:
    """Another reduction axis, a weight that is not per-feature, attention with dropout: not the pattern."""

    def rms_axis1(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * (x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6))

    x = torch.randn(2, 6, 16)
    assert fusion.fuse_rms_norm(make_fx(rms_axis1, tracing_mode="fake")(x, torch.randn(16))) == 0
    assert fusion.fuse_rms_norm(make_fx(_rms, tracing_mode="fake")(x, torch.randn(6, 16))) == 0

    def attn_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.5, False)[0]

    assert fusion.fuse_attention(make_fx(attn_dropout, tracing_mode="fake")(*_inputs("attn_mask")[:3])) == 0


def test_rotary_needs_provably_equal_halves() -> None:
    """cos/sin given as inputs may have different halves: rotate_half stays; so does a repeat of the key alone."""

    def rope_inputs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x * cos + _rotate_half(x) * sin

    x, freqs = _inputs("rotary")
    cos = torch.randn(1, 1, 6, 8)
    assert fusion.fuse_rotary(make_fx(rope_inputs, tracing_mode="fake")(x, cos, cos)) == 0

    def repeat_k_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, _repeat_kv(k, 2), v.repeat(1, 2, 1, 1))

    gm = make_fx(repeat_k_only, tracing_mode="fake")(*_inputs("attn_repeat_kv"))
    assert fusion.fuse_attention(gm) == 1
    assert torch.ops.aten.expand.default in _targets(gm)


def test_fused_ops_run_eagerly_on_dipu() -> None:
    """The composite reference runs in an eager island on any device, dipu included, and equals the CPU."""
    import torch_dipu  # noqa: F401

    x, w = _inputs("rms")
    q, k, v = _inputs("attn_causal_gqa")
    expected = [dicp_ops.rms_norm(x, w, 1e-6), dicp_ops.silu_mul(x, x), dicp_ops.attention(q, k, v, None, 0.3, True)]
    _check(expected, [_rms(x, w), _silu_mul(x, x), _attn_causal_gqa(q, k, v)])
    d = [t.to("dipu") for t in (x, w, q, k, v)]
    actual = [dicp_ops.rms_norm(d[0], d[1], 1e-6), dicp_ops.silu_mul(d[0], d[0]),
              dicp_ops.attention(d[2], d[3], d[4], None, 0.3, True)]
    assert all(t.device.type == "dipu" for t in actual)
    _check([t.cpu() for t in actual], expected)


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_matmul_views_folded(mode: str) -> None:
    """``F.linear`` on a 3-d input (view, mm, view) becomes one ``aten.matmul``; a 2-d input is left alone."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 8, generator=g)

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w)

    x = torch.randn(2, 5, 8, generator=g)
    gm = make_fx(linear, tracing_mode=mode)(x, w)
    assert fusion.fold_matmul_views(gm) == 1
    assert torch.ops.aten.mm.default not in _targets(gm) and torch.ops.aten.matmul.default in _targets(gm)
    _check(gm(x, w), linear(x, w))
    if mode == "symbolic":
        x = torch.randn(3, 7, 8, generator=g)
        _check(gm(x, w), linear(x, w))
    assert fusion.fold_matmul_views(make_fx(linear, tracing_mode=mode)(x[0], w)) == 0


# -- the ONNX lowering ---------------------------------------------------------------------------------------------


def _run_onnx(gm: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...], opset: int) -> tuple[list, set[str]]:
    """Lower ``gm`` with onnxgraph's converters at ``opset``, run it in ONNX Runtime: (outputs, ONNX op types)."""
    ort = pytest.importorskip("onnxruntime")
    from dicp.vendor.onnxgraph import fused  # noqa: F401  (registers the fused conversions)
    from dicp.vendor.onnxgraph.codegen import build_model
    from dicp.vendor.onnxgraph.conversion import conversions

    model = build_model(gm, conversions, opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    outs = session.run(None, {n: t.numpy() for n, t in zip(names, inputs, strict=True)})
    return [torch.from_numpy(o) for o in outs], {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("name", list(CASES))
def test_onnx_lowering_equals_eager(name: str, opset: int) -> None:
    fn, graph_pass, fused = CASES[name]
    inputs = _inputs(name)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    assert graph_pass(gm) == 1
    assert fused in _targets(gm)
    outs, ops = _run_onnx(gm, inputs, opset)
    expected = fn(*inputs)
    _check(outs[0], expected)
    if opset >= 23 and name == "rms":
        assert "RMSNormalization" in ops
    if opset >= 23 and name.startswith("attn"):
        assert "Attention" in ops
    if opset >= 23 and name == "rotary":
        assert "RotaryEmbedding" in ops
    if opset < 23:
        assert not ops & {"RMSNormalization", "Attention", "RotaryEmbedding"}
