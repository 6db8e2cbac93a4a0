"""dicp's bridge under ``torch.compile`` with the in-test vendor: dynamic shapes add no guards, training matches
eager, the compile cache is reused by a second process and rebuilds a corrupted entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from bridge_fake_vendor import make_vendor, sample_fn
from compile_checks import assert_same

from dicp.dynamo_bridge import compile_report, make_backend

HERE = Path(__file__).resolve().parent


def counting(backend, calls):
    def backend_counted(gm, example_inputs, **kwargs):
        calls.append(len(example_inputs))
        return backend(gm, example_inputs, **kwargs)

    return backend_counted


def attention_like(x, w):
    scores = (x @ w) @ x.transpose(1, 2)
    return (scores.sin() * 0.5).sum(-1)


def test_dynamic_shapes_one_compile_no_guards():
    calls = []
    fn = torch.compile(attention_like, backend=counting(make_backend(make_vendor()), calls), dynamic=True)
    w = torch.randn(8, 8)
    for seq in (5, 7):
        x = torch.randn(2, seq, 8)
        assert_same(fn(x, w), attention_like(x, w))
    assert len(calls) == 1
    report = compile_report()["fake"]
    assert report["guards_added"] == 0 and report["graphs_inference"] == 1 and report["vendor_islands"] == 1


def test_a_converter_that_specializes_a_size_is_caught():
    def specialize(gm):
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if node.op == "placeholder" and isinstance(val, torch.Tensor):
                [int(d) for d in val.shape]  # what a careless converter does: guards on every size

    calls = []
    vendor = make_vendor("careless", compile_hook=specialize)
    fn = torch.compile(attention_like, backend=counting(make_backend(vendor), calls), dynamic=True)
    x, w = torch.randn(2, 5, 8), torch.randn(8, 8)
    with pytest.warns(UserWarning, match=r"dicp careless: compiling the island \[aten\..*added \d+ shape guard"):
        assert_same(fn(x, w), attention_like(x, w))
    assert compile_report()["careless"]["guards_added"] > 0


def test_training_an_mlp_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.Tanh())
    reference = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = torch.randn(6, 8)
    out = torch.compile(model, backend=make_backend(make_vendor()))(x)
    out.square().mean().backward()

    def eager(t):
        t = torch.relu(t @ reference[0].t() + reference[1])
        return torch.tanh(t @ reference[2].t() + reference[3])

    expected = eager(x)
    expected.square().mean().backward()
    assert_same(out.detach(), expected.detach())
    assert_same([p.grad for p in model.parameters()], [p.grad for p in reference])
    report = compile_report()["fake"]
    assert report["graphs_forward"] == 1 and report["graphs_backward"] == 1
    assert report["vendor_islands"] >= 2 and report["guards_added"] == 0


SECOND_PROCESS = textwrap.dedent("""
    import json, sys
    import torch
    from bridge_fake_vendor import make_vendor, sample_fn
    from dicp.dynamo_bridge import compile_report, make_backend

    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    out = torch.compile(sample_fn, backend=make_backend(make_vendor()))(x, w)
    print(json.dumps({"report": compile_report()["fake"], "out": out.tolist()}))
""")


def test_cache_hit_in_a_second_process_and_corrupt_entry_rebuilt(tmp_path):
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    assert_same(torch.compile(sample_fn, backend=make_backend(make_vendor()))(x, w), sample_fn(x, w))
    first = compile_report()["fake"]
    assert (first["cache_misses"], first["cache_hits"], first["vendor_islands"]) == (2, 0, 2)
    folder = tmp_path / "dicp_cache" / "fake"
    assert len(list(folder.glob("*.bin"))) == len(list(folder.glob("*.json"))) == 2

    env = {**os.environ, "DICP_CACHE_DIR": str(tmp_path / "dicp_cache"),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (second["report"]["cache_hits"], second["report"]["cache_misses"]) == (2, 0)
    assert_same(torch.tensor(second["out"]), sample_fn(x, w))

    victim = sorted(folder.glob("*.bin"))[0]
    victim.write_bytes(victim.read_bytes()[:-3])  # truncated
    torch._dynamo.reset()
    assert_same(torch.compile(sample_fn, backend=make_backend(make_vendor()))(x, w), sample_fn(x, w))
    third = {k: v - first[k] for k, v in compile_report()["fake"].items() if k.startswith("cache_")}
    assert third == {"cache_hits": 1, "cache_misses": 0, "cache_rebuilt": 1}
    assert len(victim.read_bytes()) > 3  # rewritten whole


def test_onnxgraph_backend_by_name_and_as_the_dipu_default():
    """Smoke test through the registered backend (helper vendor onnxgraph): by name on the CPU with dynamic
    shapes, and as torch.compile's default for graphs on dipu (the droplet runtime names it)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import torch_dipu
    from torch_dipu import compile_default
    from torch_dipu.state import get_state

    w = torch.randn(8, 8)
    calls = []
    fn = torch.compile(attention_like, backend=counting(torch._dynamo.lookup_backend("onnxgraph"), calls),
                       dynamic=True)
    for seq in (5, 7):
        x = torch.randn(2, seq, 8)
        assert_same(fn(x, w), attention_like(x, w))
    assert len(calls) == 1
    report = compile_report()["onnxgraph"]
    assert report["guards_added"] == 0 and report["vendor_islands"] == 1 and report["eager_nodes"] == 0

    if torch_dipu.runtime().compile_backend != "onnxgraph":
        pytest.skip(f"the device runtime's default backend is {torch_dipu.runtime().compile_backend!r}")
    saved = get_state().config.compile_backend
    compile_default.set_fallback_backend(None)  # the runtime's default
    try:
        assert compile_default.fallback_backend() == "onnxgraph"
        before = compile_default.chosen_backends()
        x = torch.randn(2, 5, 8)
        out = torch.compile(attention_like)(x.to("dipu"), w.to("dipu"))
        assert out.device.type == "dipu"
        assert_same(out.cpu(), attention_like(x, w))
        chosen = compile_default.chosen_backends()
        chosen.subtract(before)
        assert +chosen == {"onnxgraph": 1}
    finally:
        compile_default.set_fallback_backend(saved)
