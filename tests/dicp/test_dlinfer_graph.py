"""Graph mode of dlinfer: ``torch.ops.dlinfer.*`` nodes lowered by onnxgraph (convert_dlinfer.py) to ONNX fused
operators, each dlinfer operator one node of the graph the backend receives, equal to op mode (eager)."""

from __future__ import annotations

import dataclasses
import operator
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
import torch
from onnx_island import compile_checked, trace_island
from torch.fx.experimental.proxy_tensor import make_fx

import dlinfer
import dlinfer.ops.llm as L
from diopi.compare import all_passed, compare_outputs

pytest.importorskip("onnxruntime")

from dicp.dynamo_bridge import compile_report, make_backend  # noqa: E402
from dicp.vendor.onnxgraph import vendor  # noqa: E402

dl = torch.ops.dlinfer
T, H, KV, D = 5, 4, 2, 8


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_GEN)


_GEN = torch.Generator().manual_seed(0)


def _dup(t: torch.Tensor) -> torch.Tensor:
    """HF's cos/sin layout: one half repeated (the op's documented convention)."""
    return torch.cat([t, t], -1)


CASES = {
    "rms_norm": (lambda x, w: dl.rms_norm(x, w, 1e-6), lambda: [_r(T, 32), _r(32)]),
    "add_rms_norm": (lambda x, r, w: dl.add_rms_norm(x, r, w, 1e-5), lambda: [_r(T, 32), _r(T, 32), _r(32)]),
    "rotary": (lambda q, k, c, s: dl.apply_rotary_pos_emb(q, k, c, s, None, None),
               lambda: [_r(T, H, D), _r(T, KV, D), _dup(_r(T, D // 2)), _dup(_r(T, D // 2))]),
    "rotary_partial": (lambda q, k, c, s: dl.apply_rotary_pos_emb(q, k, c, s, None, None),
                       lambda: [_r(T, H, D), _r(T, KV, D), _dup(_r(T, 2)), _dup(_r(T, 2))]),
    "rotary_cache": (lambda q, k, p, c: dl.apply_rotary_pos_emb(q, k, None, None, p, c),
                     lambda: [_r(T, H, D), _r(T, KV, D), torch.tensor([3, 0, 1, 2, 5]), _r(9, D)]),
    "rotary_batched": (lambda q, k, c, s: dl.apply_rotary_pos_emb(q, k, c, s, None, None),
                       lambda: [_r(2, 3, H, D), _r(2, 3, KV, D), _dup(_r(2, 3, D // 2)), _dup(_r(2, 3, D // 2))]),
    "rotary_batched_cache": (lambda q, k, p, c: dl.apply_rotary_pos_emb(q, k, None, None, p, c),
                             lambda: [_r(2, 3, H, D), _r(2, 3, KV, D), torch.tensor([[0, 1, 2], [4, 5, 6]]), _r(9, D)]),
    "rotary_per_head": (lambda q, k, c, s: dl.apply_rotary_pos_emb(q, k, c, s, None, None),
                        lambda: [_r(T, H, D), _r(T, KV, D), _r(T, 1, D), _r(T, 1, D)]),
    "silu_and_mul": (lambda x: dl.silu_and_mul(x, -1), lambda: [_r(T, 16)]),
    "linear": (lambda x, w, b: dl.linear(x, w, b, False), lambda: [_r(T, 16), _r(8, 16), _r(8)]),
    "linear_3d": (lambda x, w: dl.linear(x, w, None, False), lambda: [_r(2, T, 16), _r(8, 16)]),
    "moe_gating": (lambda x: dl.moe_gating_topk_softmax(x, 2, True), lambda: [_r(T, 6)]),
    "moe_gating_raw": (lambda x: dl.moe_gating_topk_softmax(x, 3, False), lambda: [_r(T, 6)]),
    "fused_moe": (lambda h, gu, dn, w, i: dl.fused_moe(h, gu, dn, w, i, 2, True),
                  lambda: [_r(T, 16), _r(4, 12, 16), _r(4, 16, 6), _r(T, 2).softmax(-1),
                           torch.tensor([[0, 1], [3, 2], [1, 3], [2, 0], [3, 1]])]),
    "prefill_attention": (lambda q, k, v, st, ln: dl.prefill_attention(q, k, v, st, ln, 3, H, KV, []),
                          lambda: [_r(T, H, D), _r(T, KV, D), _r(T, KV, D), torch.tensor([0, 3]),
                                   torch.tensor([3, 2])]),
    "paged_decode_attention": (
        lambda q, kc, vc, bt, kl: dl.paged_decode_attention(q, kc, vc, bt, 4, kl, 8, H, KV, 0.3),
        lambda: [_r(2, H, D), _r(6, 4, KV, D), _r(6, 4, KV, D), torch.tensor([[1, 0], [2, 3]]),
                 torch.tensor([3, 7])]),
    "paged_prefill_attention": (
        lambda q, k, kc, vc, bt, st, ql, kl: dl.paged_prefill_attention(q, k, k, kc, vc, bt, 4, st, ql, kl, 3, H, KV,
                                                                        []),
        lambda: [_r(T, H, D), _r(T, KV, D), _r(6, 4, KV, D), _r(6, 4, KV, D), torch.tensor([[4, 1], [2, 5]]),
                 torch.tensor([0, 3]), torch.tensor([3, 2]), torch.tensor([5, 7])]),
    "paged_decode_attention_int8": (
        lambda q, kc, vc, bt, kl, s1, z1, s2, z2: dl.paged_decode_attention(q, kc, vc, bt, 4, kl, 8, H, KV, None, None,
                                                                           s1, z1, s2, z2, 8),
        lambda: [_r(2, H, D), *_int8_cache(), torch.tensor([[1, 0], [2, 3]]), torch.tensor([3, 7]), *_scales()]),
    "paged_prefill_attention_int8": (
        lambda q, k, kc, vc, bt, st, ql, kl, s1, z1, s2, z2: dl.paged_prefill_attention(
            q, k, k, kc, vc, bt, 4, st, ql, kl, 3, H, KV, [], None, None, s1, z1, s2, z2, 8),
        lambda: [_r(T, H, D), _r(T, KV, D), *_int8_cache(), torch.tensor([[4, 1], [2, 5]]), torch.tensor([0, 3]),
                 torch.tensor([3, 2]), torch.tensor([5, 7]), *_scales()]),
    "dynamic_quant": (lambda x: dl.dynamic_quant(x, torch.int8, "PER_TOKEN"), lambda: [_r(T, 16)]),
    "rms_norm_w8a8": (lambda x, w: dl.rms_norm_w8a8(x, w, 1e-6, torch.int8), lambda: [_r(T, 32), _r(32)]),
    "add_rms_norm_w8a8": (lambda x, r, w: dl.add_rms_norm_w8a8(x, r, w, 1e-6, torch.int8),
                          lambda: [_r(T, 32), _r(T, 32), _r(32)]),
    "linear_w8a8": (lambda a, b, rs, ls, bias: dl.linear_w8a8(a, b, rs, ls, torch.float32, torch.int8, bias),
                    lambda: [torch.randint(-127, 128, (T, 16), dtype=torch.int8, generator=_GEN),
                             torch.randint(-127, 128, (8, 16), dtype=torch.int8, generator=_GEN),
                             _r(T, 1).abs(), _r(8).abs(), _r(8)]),
    "w4a16": (lambda x, q, s: dl.weight_quant_matmul(x, q, s, None, None, False, 0),
              lambda: [_r(T, 16), torch.randint(0, 256, (16, 4), dtype=torch.uint8, generator=_GEN), _r(8).abs()]),
    "w4a16_grouped": (lambda x, q, s, z, b: dl.weight_quant_matmul(x, q, s, z, b, False, 4),
                      lambda: [_r(T, 16), torch.randint(0, 256, (16, 4), dtype=torch.uint8, generator=_GEN),
                               _r(4, 8).abs(), torch.randint(0, 16, (4, 8), generator=_GEN).float(), _r(8)]),
    "w8a16": (lambda x, q, s: dl.weight_quant_matmul(x, q, s, None, None, False, 0),
              lambda: [_r(T, 16), torch.randint(-127, 128, (16, 8), dtype=torch.int8, generator=_GEN), _r(8).abs()]),
}

def _int8_cache() -> list[torch.Tensor]:
    return [torch.randint(-128, 128, (6, 4, KV, D), dtype=torch.int8, generator=_GEN) for _ in range(2)]


def _scales() -> list[torch.Tensor]:
    return [_r(6, 4, KV).abs() / 50, torch.randint(-20, 20, (6, 4, KV), generator=_GEN).float()] * 2


#: ONNX operators each case must lower to (the fused operator, or the heart of the subgraph).
ONNX_OPS = {"rms_norm": "RMSNormalization", "add_rms_norm": "RMSNormalization", "rotary": "RotaryEmbedding",
            "rotary_partial": "RotaryEmbedding", "rotary_cache": "RotaryEmbedding", "rotary_batched": "RotaryEmbedding",
            "rotary_batched_cache": "RotaryEmbedding", "rotary_per_head": "Neg",
            "silu_and_mul": "Sigmoid", "linear": "MatMul", "linear_3d": "MatMul", "moe_gating": "TopK",
            "moe_gating_raw": "TopK", "fused_moe": "Einsum", "prefill_attention": "Attention",
            "paged_decode_attention": "Attention", "paged_prefill_attention": "Attention",
            "paged_decode_attention_int8": "Attention", "paged_prefill_attention_int8": "Attention",
            "dynamic_quant": "Round", "rms_norm_w8a8": "RMSNormalization",
            "add_rms_norm_w8a8": "RMSNormalization", "linear_w8a8": "MatMulInteger", "w4a16": "BitShift",
            "w4a16_grouped": "BitShift", "w8a16": "MatMul"}


def _listify(x: object) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _onnx_ops(artifact: bytes) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load_from_string(artifact).graph.node}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("name", list(CASES))
def test_single_op_lowering_equals_eager(name: str, dynamic: bool) -> None:
    fn, make_args = CASES[name]
    args = make_args()
    island = trace_island(fn, args, dynamic=dynamic)
    targets = [n.target for n in island.gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    assert len(targets) == 1 and targets[0].namespace == "dlinfer", targets  # one node, not decomposed
    runner = compile_checked(island, vendor())  # converted, no guard added
    actual = list(runner(*island.inputs(*args)))
    expected = _listify(fn(*args))
    fp64 = _listify(fn(*[a.double() if a.is_floating_point() else a for a in args]))
    results = compare_outputs(actual, expected, expected_fp64=fp64)
    assert all_passed(results), [r.message for r in results]
    ops = _onnx_ops(vendor().compile(island.gm))
    assert ONNX_OPS[name] in ops, sorted(ops)


def test_bf16_rounds_like_eager() -> None:
    fn, make_args = CASES["add_rms_norm"]
    args = [a.to(torch.bfloat16) for a in make_args()]
    island = trace_island(fn, args, dynamic=False)
    actual = list(compile_checked(island, vendor())(*args))
    fp64 = _listify(fn(*[a.double() for a in args]))
    results = compare_outputs(actual, _listify(fn(*args)), expected_fp64=fp64)
    assert all_passed(results), [r.message for r in results]


def test_declined_forms_stay_one_eager_node() -> None:
    """Forms the converters do not lower: the node keeps running as one dlinfer node, with the reason."""
    q, kc8 = _r(2, H, D), torch.zeros(6, 4, KV, D, dtype=torch.int8)
    kc, bt, kl = _r(6, 4, KV, D), torch.tensor([[1, 0], [2, 3]]), torch.tensor([3, 7])
    forms = {
        "without k_scale": (lambda q, c, b, n: dl.paged_decode_attention(q, c, c, b, 4, n, 8, H, KV, None, None,
                                                                         None, None, None, None, 8), [q, kc8, bt, kl]),
        "alibi_slopes": (lambda q, c, b, n: dl.paged_decode_attention(q, c, c, b, 4, n, 8, H, KV, None, [0.5] * H),
                         [q, kc, bt, kl]),
        "all_reduce": (lambda x, w: dl.linear(x, w, None, True), [_r(2, 4), _r(3, 4)]),
        "attn_mask": (lambda q, k, s, n, m: dl.prefill_attention(q, k, k, s, n, 3, H, KV, [m]),
                      [_r(3, H, D), _r(3, KV, D), torch.tensor([0]), torch.tensor([3]),
                       torch.zeros(3, 3, dtype=torch.bool)]),
    }
    for reason, (fn, args) in forms.items():
        gm = make_fx(fn, tracing_mode="fake")(*args)
        nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
        assert len(nodes) == 1
        why = vendor().conversions.unsupported(nodes[0])
        assert why is not None and reason in why, why


class _Recorder:
    """A rewrite pass that notes the node targets of the ATen graphs the bridge receives (before partitioning):
    dlinfer ops by name, functionalized mutations as ``auto:<op>`` (with the higher-order op's name)."""

    def __init__(self) -> None:
        self.graphs: list[Counter] = []

    def __call__(self, gm: torch.fx.GraphModule) -> int:
        out: Counter = Counter()
        for n in gm.graph.nodes:
            if n.op != "call_function" or n.target is operator.getitem:
                continue
            if "auto_functionalized" in str(n.target):
                out[f"auto:{n.args[0]._opname}"] += 1
                out[n.target.__name__] += 1
            elif isinstance(n.target, torch._ops.OpOverload) and n.target.namespace == "dlinfer":
                out[n.target._opname] += 1
            else:
                out["aten"] += 1
        self.graphs.append(out)
        return 0

    def targets(self) -> Counter:
        """The counts over every graph."""
        return sum(self.graphs, Counter())


def _backend() -> tuple[object, _Recorder]:
    recorder = _Recorder()
    v = vendor()
    return make_backend(dataclasses.replace(v, rewrite_passes=[recorder, *v.rewrite_passes])), recorder


def _artifact_ops(tmp_path: Path) -> set[str]:
    ops: set[str] = set()
    for path in (tmp_path / "dicp_cache" / "onnxgraph").glob("*.bin"):
        ops |= _onnx_ops(path.read_bytes())
    return ops


@pytest.mark.parametrize(("v2", "int8"), [(False, False), (True, False), (False, True), (True, True)],
                         ids=["auto_functionalized", "auto_functionalized_v2", "v1_int8", "v2_int8"])
def test_fill_kv_cache_functional_form(v2: bool, int8: bool, tmp_path: Path) -> None:
    def fill(k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, idx: torch.Tensor,
             *scales: torch.Tensor) -> torch.Tensor:
        pairs = (scales[:2], scales[2:]) if scales else ((), ())
        L.fill_kv_cache(k * 2, v, kc, vc, idx, *pairs, quant_bits=8 if scales else 0)
        return kc.float().sum(dim=(1, 2, 3))

    caches = ([torch.zeros(4, 4, KV, D, dtype=torch.int8) for _ in range(2)] if int8
              else [_r(4, 4, KV, D), _r(4, 4, KV, D)])
    scales = [torch.zeros(4, 4, KV) for _ in range(4)] if int8 else []
    args = [_r(3, KV, D), _r(3, KV, D), *caches, torch.tensor([1, 6, 13]), *scales]
    eager_args = [a.clone() for a in args]
    expected = fill(*eager_args)
    backend, recorder = _backend()
    with mock.patch.object(torch._inductor.config, "enable_auto_functionalized_v2", v2), torch.no_grad():
        actual = torch.compile(fill, backend=backend)(*args)
    counts = recorder.targets()
    assert counts["auto:fill_kv_cache"] == 1 and counts["auto_functionalized_v2" if v2 else "auto_functionalized"] == 1
    mutated = [2, 3, 5, 6, 7, 8] if int8 else [2, 3]
    results = compare_outputs([actual, *(args[i] for i in mutated)], [expected, *(eager_args[i] for i in mutated)])
    assert all_passed(results), [r.message for r in results]
    report = compile_report()["onnxgraph"]
    assert report["eager_ops"] == {} and report["vendor_islands"] == 1
    assert "ScatterND" in _artifact_ops(tmp_path)


class DecodeStep(torch.nn.Module):
    """One decoder layer's decode step written with dlinfer.ops directly (independent of the transformers
    adaptor): embedding, rms_norm, linear, rotary, fill_kv_cache, paged_decode_attention, add_rms_norm,
    silu_and_mul, logits."""

    def __init__(self, hidden: int = 32, vocab: int = 50) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1)

        def p(*shape: int, base: float = 0.0) -> torch.nn.Parameter:
            return torch.nn.Parameter(base + 0.2 * torch.randn(*shape, generator=gen))

        self.emb, self.wqkv, self.wo = p(vocab, hidden), p((H + 2 * KV) * D, hidden), p(hidden, H * D)
        self.n1, self.n2 = p(hidden, base=1.0), p(hidden, base=1.0)
        self.up, self.down, self.head = p(128, hidden), p(hidden, 64), p(vocab, hidden)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D)))

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor,
                slots: torch.Tensor, block_table: torch.Tensor, kv_len: torch.Tensor) -> torch.Tensor:
        batch = ids.shape[0]
        x = self.emb[ids]
        q, k, v = L.linear(L.rms_norm(x, self.n1, 1e-6), self.wqkv).split([H * D, KV * D, KV * D], -1)
        q, k, v = q.reshape(batch, H, D), k.reshape(batch, KV, D), v.reshape(batch, KV, D)
        freqs = pos.float()[:, None] * self.inv_freq[None]
        angles = torch.cat([freqs, freqs], -1)
        q, k = L.apply_rotary_pos_emb(q, k, angles.cos(), angles.sin())
        L.fill_kv_cache(k, v, kc, vc, slots)
        attn = L.paged_decode_attention(q, kc, vc, block_table, kc.shape[1], kv_len, 16, H, KV)
        h, res = L.add_rms_norm(L.linear(attn.reshape(batch, -1), self.wo), x, self.n2, 1e-6)
        y = L.linear(L.silu_and_mul(L.linear(h, self.up)), self.down) + res
        return L.linear(y, self.head)


def _decode(step: object, device: str = "cpu", steps: int = 4) -> tuple[list, list, torch.Tensor]:
    kc, vc = torch.zeros(8, 4, KV, D, device=device), torch.zeros(8, 4, KV, D, device=device)
    table = torch.tensor([[3, 1, 5, 0], [2, 7, 4, 6]], device=device)  # shuffled blocks
    ids, tokens, logits = torch.tensor([5, 9], device=device), [], []
    for t in range(steps):
        pos = torch.tensor([t, t], device=device)
        slots = table[torch.arange(2, device=device), pos // 4] * 4 + pos % 4
        out = step(ids, pos, kc, vc, slots, table, pos + 1)
        ids = out.argmax(-1)
        logits.append(out.cpu())
        tokens.append(ids.tolist())
    return tokens, logits, kc.cpu()


@pytest.mark.parametrize("device", ["cpu", "dipu"])
def test_decode_step_module_compiled_equals_op_mode(device: str, tmp_path: Path) -> None:
    """The compiled decode step (on ``device``; dipu tensors reach ONNX Runtime through droplet's host storage)
    equals op mode on the CPU."""
    if device == "dipu":
        import torch_dipu  # noqa: F401
    model = DecodeStep()
    backend, recorder = _backend()
    with torch.no_grad():
        tokens, logits, cache = _decode(model)
        dlinfer.reset_counts()
        c_tokens, c_logits, c_cache = _decode(torch.compile(DecodeStep().to(device), backend=backend, dynamic=True),
                                              device)
    assert c_tokens == tokens
    results = compare_outputs([*c_logits, c_cache], [*logits, cache])
    assert all_passed(results), [r.message for r in results]
    assert len(recorder.graphs) == 1  # one graph for every step: no graph break, no recompile
    counts = recorder.targets()
    assert {k: v for k, v in counts.items() if k not in ("aten", "auto_functionalized_v2")} == {
        "rms_norm": 1, "linear": 5, "apply_rotary_pos_emb": 1, "auto:fill_kv_cache": 1,
        "paged_decode_attention": 1, "add_rms_norm": 1, "silu_and_mul": 1}
    assert dlinfer.op_counts() == {}  # the compiled steps ran no eager dlinfer kernel
    report = compile_report()["onnxgraph"]
    assert report["eager_ops"] == {} and report["vendor_islands"] == 1 and report["guards_added"] == 0
    assert {"RMSNormalization", "RotaryEmbedding", "ScatterND", "Attention"} <= _artifact_ops(tmp_path)


class _CompiledDecode(torch.nn.Module):
    """Stands in for a model's decoder-layer list: decode steps run every layer in one graph compiled with
    ``backend``, prefill runs them eagerly (op mode)."""

    def __init__(self, layers: torch.nn.ModuleList, backend: object, max_kv_seq_len: int) -> None:
        super().__init__()
        self.inner = layers
        self.compiled = torch.compile(self.run_layers, backend=backend, dynamic=True)
        self.max_kv_seq_len = max_kv_seq_len
        self.decode_calls = 0

    def run_layers(self, hidden: torch.Tensor, **kwargs: object) -> torch.Tensor:
        for layer in self.inner:
            hidden = layer(hidden, **kwargs)
        return hidden

    def forward(self, hidden: torch.Tensor, attention_mask: object = None, **kwargs: object) -> torch.Tensor:
        from dlinfer.framework.transformers import StepContext

        if not (isinstance(attention_mask, StepContext) and attention_mask.is_decoding):
            return self.run_layers(hidden, attention_mask=attention_mask, **kwargs)
        self.decode_calls += 1
        # dlinfer.ops.paged_decode_attention calls int() on max_kv_seq_len, which would specialize a symbolic
        # length (one graph per step): a fixed upper bound keeps one graph (the ONNX lowering ignores it)
        step = dataclasses.replace(attention_mask, max_kv_seq_len=self.max_kv_seq_len)
        return self.compiled(hidden, attention_mask=step, **kwargs)


def test_llama_decode_with_adaptor_compiled_equals_op_mode(tmp_path: Path) -> None:
    """Acceptance: a tiny Llama with the transformers adaptor installed, its decode steps compiled with
    onnxgraph, generates the same tokens (and logits) as op mode; the graph holds each dlinfer op as one node."""
    from ditorch.models import get_family
    from dlinfer.framework import transformers as dlinfer_tf

    model = get_family("llama").build(seed=0).eval()
    model.generation_config.eos_token_id = None
    ids = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
    kwargs = dict(input_ids=ids, attention_mask=torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]), max_new_tokens=4,
                  do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    backend, recorder = _backend()
    dlinfer_tf.install(model, block_size=4, shuffle_seed=3)
    layers = model.model.layers
    try:
        with torch.no_grad():
            expected = model.generate(**kwargs)
            wrapper = _CompiledDecode(layers, backend, max_kv_seq_len=64)
            model.model.layers = torch.nn.ModuleList([wrapper])
            dlinfer.reset_counts()
            with mock.patch.object(torch.fx.experimental._config, "use_duck_shape", False):
                actual = model.generate(**kwargs)
    finally:
        model.model.layers = layers
        dlinfer_tf.uninstall(model)
    assert wrapper.decode_calls == 3
    assert actual.sequences.tolist() == expected.sequences.tolist()
    results = compare_outputs(list(actual.logits), list(expected.logits))
    assert all_passed(results), [r.message for r in results]
    assert len(recorder.graphs) == 1  # every decode step ran the same graph: no graph break, no recompile
    counts = recorder.graphs[0]
    assert {k: v for k, v in counts.items() if k not in ("aten", "auto_functionalized_v2")} == {
        "rms_norm": 2, "apply_rotary_pos_emb": 2, "auto:fill_kv_cache": 2, "paged_decode_attention": 2,
        "add_rms_norm": 2, "silu_and_mul": 2}
    # op mode ran only the prefill (and the final norm): no paged_decode_attention outside the ONNX graph
    assert "paged_decode_attention" not in dlinfer.op_counts() and dlinfer.op_counts()["prefill_attention"] == 2
    report = compile_report()["onnxgraph"]
    assert report["eager_ops"] == {} and report["vendor_islands"] == 1 and report["guards_added"] == 0
    assert {"RMSNormalization", "RotaryEmbedding", "ScatterND", "Attention"} <= _artifact_ops(tmp_path)
