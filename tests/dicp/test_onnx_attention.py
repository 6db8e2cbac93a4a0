"""onnxgraph's conversion of PyTorch's CPU flash attention (forward: out and logsumexp; backward: the three
gradients): single ops traced by make_fx (static and symbolic shapes) against eager, judged by diopi.compare
with eager float64 as the noise reference; W1 training under torch.compile keeps no attention op eager."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from onnx_island import compile_checked, trace_island

from diopi.compare import all_passed, compare_outputs

pytest.importorskip("onnxruntime")

from dicp.vendor.onnxgraph import vendor  # noqa: E402

aten = torch.ops.aten
FORWARD = aten._scaled_dot_product_flash_attention_for_cpu.default
BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
SEQS = (6, 9)  # the symbolic cases run at both sequence lengths with one compile


@dataclass(frozen=True)
class Form:
    """One attention form: head counts, causal, an additive mask, an explicit scale."""

    name: str
    heads: tuple[int, int]
    causal: bool = False
    mask: bool = False
    scale: float | None = None


FORMS = [
    Form("gqa_causal", (4, 2), causal=True),
    Form("mha_mask_scale", (2, 2), mask=True, scale=0.3),
    Form("gqa_causal_mask", (4, 1), causal=True, mask=True),
]


def _inputs(form: Form, seq: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seq)
    hq, hkv = form.heads
    q, k, v = (torch.randn(2, h, seq, 8, generator=g, dtype=dtype) for h in (hq, hkv, hkv))
    tensors = [q, k, v]
    if form.mask:
        tensors.append(torch.randn(1, 1, seq, seq, generator=g, dtype=dtype))
    tensors.append(torch.randn(2, hq, seq, 8, generator=g, dtype=dtype))  # the gradient of out
    return tensors


def _forward(form: Form) -> Callable[..., tuple[torch.Tensor, ...]]:
    def fn(q, k, v, *rest):
        mask = rest[0] if form.mask else None
        return FORWARD(q, k, v, 0.0, form.causal, attn_mask=mask, scale=form.scale)

    return fn


def _backward(form: Form) -> Callable[..., tuple[torch.Tensor, ...]]:
    def fn(q, k, v, *rest):
        mask = rest[0] if form.mask else None
        out, lse = FORWARD(q, k, v, 0.0, form.causal, attn_mask=mask, scale=form.scale)
        return BACKWARD(rest[-1], q, k, v, out, lse, 0.0, form.causal, attn_mask=mask, scale=form.scale)

    return fn


def _check(make_fn: Callable[[Form], Callable[..., tuple[torch.Tensor, ...]]], form: Form, dynamic: bool,
           op: torch._ops.OpOverload) -> None:
    v = vendor()
    fn = make_fn(form)
    island = trace_island(fn, _inputs(form, SEQS[0]), dynamic, v.decompositions)
    targets = [n.target for n in island.gm.graph.nodes if n.op == "call_function"]
    assert op in targets, targets
    runner = compile_checked(island, v)
    for seq in SEQS if dynamic else SEQS[:1]:
        args = _inputs(form, seq)
        expected = list(fn(*args))
        expected64 = [t.double() for t in fn(*(a.double() for a in args))]
        actual = runner(*island.inputs(*args))
        results = compare_outputs(actual, expected, expected_fp64=expected64, op=form.name)
        assert all_passed(results), f"{form.name} seq={seq}: " + "; ".join(r.message for r in results if r.message)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
def test_flash_attention_forward(form: Form, dynamic: bool) -> None:
    _check(_forward, form, dynamic, FORWARD)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
def test_flash_attention_backward(form: Form, dynamic: bool) -> None:
    _check(_backward, form, dynamic, BACKWARD)


def test_flash_attention_bfloat16_logsumexp_float32() -> None:
    """bfloat16 attention: out in bfloat16, logsumexp in float32 (as the CPU kernel returns them)."""
    form = FORMS[0]
    v = vendor()
    args = _inputs(form, SEQS[0], torch.bfloat16)
    island = trace_island(_forward(form), args, False, v.decompositions)
    actual = v.load(v.compile(island.gm), island.gm)(*island.inputs(*args))
    expected = list(_forward(form)(*args))
    assert [t.dtype for t in actual] == [torch.bfloat16, torch.float32]
    expected64 = [t.double() for t in _forward(form)(*(a.double() for a in args))]
    results = compare_outputs(actual, expected, expected_fp64=expected64)
    assert all_passed(results), [r.message for r in results if r.message]


def test_dropout_is_declined() -> None:
    """dropout_p != 0 is random: the node is declined with a reason (it runs eagerly)."""
    form = FORMS[0]

    def fn(q, k, v, *rest):
        return FORWARD(q, k, v, 0.1, True)

    island = trace_island(fn, _inputs(form, SEQS[0]), False)
    node = next(n for n in island.gm.graph.nodes if n.target is FORWARD)
    reason = vendor().conversions.unsupported(node)
    assert reason is not None and "dropout_p=0.1" in reason, reason


def test_w1_training_has_no_eager_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """W1 (4 query / 2 key-value heads, causal) trains 2 steps with backend="onnxgraph": the losses equal eager's
    and neither attention op is left eager. Under DICP_PRECISION_CHECK=1 every island also runs eagerly, with the
    fused operators' references (a reference returning another memory layout than the pattern it replaced broke
    the views after it)."""
    from dicp.config import reset_config

    monkeypatch.setenv("DICP_PRECISION_CHECK", "1")
    reset_config()
    transformers = pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_common import W1
    from dicp.dynamo_bridge.report import compile_report

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**W1))
    ids = torch.randint(0, W1["vocab_size"], (2, 32), generator=torch.Generator().manual_seed(0))

    def train(m: torch.nn.Module, x: torch.Tensor) -> list[float]:
        optimizer = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = []
        for _ in range(2):
            loss = m(input_ids=x, labels=x).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    eager = train(copy.deepcopy(model), ids)
    eager64 = train(copy.deepcopy(model).double(), ids)
    compiled = train(torch.compile(model, backend="onnxgraph"), ids)
    results = compare_outputs(torch.tensor(compiled), torch.tensor(eager),
                              expected_fp64=torch.tensor(eager64, dtype=torch.float64))
    assert all_passed(results), (compiled, eager, [r.message for r in results if r.message])
    report = compile_report().get("onnxgraph", {})
    assert report.get("graphs_forward", 0) >= 1 and report.get("graphs_backward", 0) >= 1, report
    eager_ops = report.get("eager_ops", {})
    assert not [op for op in eager_ops if "attention" in op], eager_ops
    assert report.get("precision_checks", 0) >= 2 and report.get("precision_mismatches", 0) == 0, report
