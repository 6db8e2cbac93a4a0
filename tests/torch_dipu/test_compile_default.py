"""``torch.compile`` with the default backend on dipu (torch_dipu/compile_default.py).

Graphs on dipu are compiled with the device's backend (``aot_eager`` by default) and train like the CPU's
eager run; graphs on the CPU still reach inductor with their ``mode``/``options``; explicit backends pass
through. Inductor itself is not run here (a C++ build per graph would dominate the file's time): the tests
that need it replace ``compile_fx`` and check what inductor was asked to compile.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import torch_dipu
from diopi import compile_default as device_aware
from torch_dipu import compile_default
from torch_dipu.config import DipuConfig
from torch_dipu.state import get_state
from torch_dipu.tensor import DipuTensor


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    """Each test starts with empty dynamo caches, ``aot_eager`` named as the fallback backend (as
    ``DIPU_COMPILE_BACKEND=aot_eager`` does: the vendor's own default may be a graph compiler, see
    test_fallback_backend_is_a_setting) and no warning given yet."""
    torch._dynamo.reset()
    monkeypatch.setattr(device_aware, "_warned_inductor_settings", False)
    saved = get_state().config.compile_backend
    compile_default.set_fallback_backend("aot_eager")
    yield
    compile_default.set_fallback_backend(saved)
    torch._dynamo.reset()


def chosen_since(before):
    after = compile_default.chosen_backends()
    after.subtract(before)
    return {k: v for k, v in after.items() if v}


def train(model, batches, device, compiled, steps=3):
    """Losses, final gradients and parameters of ``steps`` AdamW steps of a copy of ``model`` on ``device``."""
    torch.manual_seed(0)
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    run = torch.compile(model) if compiled else model
    losses = []
    for step in range(steps):
        loss = batches(run, device, step)
        loss.backward()
        opt.step()
        if step < steps - 1:
            opt.zero_grad()
        losses.append(loss.detach().cpu())
    grads = [p.grad.detach().cpu() for p in model.parameters()]
    params = [p.detach().cpu() for p in model.parameters()]
    return torch.stack(losses), grads, params


def assert_trains_like_cpu_eager(model, batches):
    before = compile_default.chosen_backends()
    on_dipu = train(model, batches, "dipu", compiled=True)
    assert chosen_since(before) == {"aot_eager": 1}  # one graph, not inductor
    on_cpu = train(model, batches, "cpu", compiled=False)
    torch.testing.assert_close(on_dipu, on_cpu)
    return on_dipu[0]


def test_default_compile_trains_an_mlp_on_dipu_like_cpu_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 1))
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def batches(run, device, step):
        return torch.nn.functional.mse_loss(run(x.to(device) * (step + 1)), y.to(device))

    losses = assert_trains_like_cpu_eager(model, batches)
    assert losses[-1] < losses[0]


def test_default_compile_trains_a_tiny_llama_on_dipu_like_cpu_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 128, (2, 16))

    def batches(run, device, step):
        tokens = ids.to(device)
        return run(input_ids=tokens, labels=tokens).loss

    losses = assert_trains_like_cpu_eager(model, batches)
    assert losses[-1] < losses[0]


@pytest.fixture
def inductor_calls(monkeypatch):
    """Replace inductor's ``compile_fx`` by a recorder that runs the graph as it is."""
    import torch._inductor.compile_fx

    calls = []

    def compile_fx(gm, example_inputs, config_patches=None, **kwargs):
        calls.append({"devices": {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)},
                      "config": dict(config_patches or {})})
        return gm.forward

    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", compile_fx)
    return calls


def test_cpu_graphs_still_reach_inductor_with_their_mode_and_options(inductor_calls):
    x = torch.randn(4, 4)
    before = compile_default.chosen_backends()
    torch.testing.assert_close(torch.compile(lambda t: t.sin() + 1)(x), x.sin() + 1)
    torch.testing.assert_close(torch.compile(lambda t: t.cos(), options={"epilogue_fusion": False})(x), x.cos())
    torch.testing.assert_close(torch.compile(lambda t: t.tan(), mode="max-autotune-no-cudagraphs")(x), x.tan())
    torch.testing.assert_close(torch.compile(lambda t: t.exp(), backend="inductor")(x), x.exp())
    assert chosen_since(before) == {"inductor": 4}
    assert [c["devices"] for c in inductor_calls] == [{"cpu"}] * 4
    assert "epilogue_fusion" not in inductor_calls[0]["config"]
    assert inductor_calls[1]["config"]["epilogue_fusion"] is False
    assert inductor_calls[2]["config"]["max_autotune"] is True


def test_dipu_graphs_do_not_reach_inductor(inductor_calls):
    """Also a graph whose only contact with dipu is a factory's ``device=`` (no dipu input)."""
    x = torch.randn(3)
    out = torch.compile(lambda t: t.to("dipu") * 2)(x)
    made = torch.compile(lambda: torch.ones(3, device="dipu") + torch.tensor([1.0, 2.0, 3.0], device="dipu"))()
    assert inductor_calls == []
    assert out.device.type == made.device.type == "dipu"
    torch.testing.assert_close(made.cpu(), torch.tensor([2.0, 3.0, 4.0]))
    assert compile_default.graph_on_device(torch.fx.symbolic_trace(lambda t: t.to("dipu:1")), [torch.ones(1)])


def test_reduce_overhead_on_dipu_warns_once_and_runs(inductor_calls):
    @torch.compile(mode="reduce-overhead")
    def f(t):
        return t.sin() * 2

    x = torch.randn(5, device="dipu")
    with pytest.warns(UserWarning, match=r"mode='reduce-overhead'.*'aot_eager'") as record:
        torch.testing.assert_close(f(x).cpu(), x.cpu().sin() * 2)
        torch.compile(lambda t: t.cos(), mode="reduce-overhead")(x)
        torch.compile(lambda t: t.tan(), options={"epilogue_fusion": False})(x)
    assert len([w for w in record if "inductor settings" in str(w.message)]) == 1
    assert inductor_calls == []
    device_aware._warned_inductor_settings = False
    with warnings.catch_warnings(record=True) as record:  # mode/options not given: nothing to warn about
        warnings.simplefilter("always")
        torch.compile(lambda t: t.exp())(x)
    assert not [w for w in record if "inductor settings" in str(w.message)]


def test_decorator_forms_and_module_compile():
    @torch.compile
    def f(t):
        return t * 3

    x = torch.randn(2, device="dipu")
    before = compile_default.chosen_backends()
    torch.testing.assert_close(f(x).cpu(), x.cpu() * 3)
    assert chosen_since(before) == {"aot_eager": 1}
    assert torch.compile(mode="default")(lambda t: t + 1)(x).device.type == "dipu"
    with pytest.raises(RuntimeError, match="Either mode or options"):  # torch.compile's own error, unchanged
        torch.compile(lambda t: t, mode="default", options={})


def test_explicit_backends_pass_through():
    x = torch.randn(3, device="dipu")
    before = compile_default.chosen_backends()
    counter = CompileCounter()
    torch.testing.assert_close(torch.compile(lambda t: t.sin(), backend=counter)(x).cpu(), x.cpu().sin())
    torch.testing.assert_close(torch.compile(lambda t: t.cos(), backend="eager")(x).cpu(), x.cpu().cos())
    assert counter.frame_count == 1
    assert chosen_since(before) == {}


def test_fallback_backend_is_a_setting():
    compile_default.set_fallback_backend(None)  # the vendor's default: dicp's onnxgraph when it can run
    onnx_installed = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))
    expected = "onnxgraph" if onnx_installed else "aot_eager"
    assert compile_default.fallback_backend() == expected == torch_dipu.runtime().compile_backend
    compile_default.set_fallback_backend("aot_eager")
    assert compile_default.fallback_backend() == "aot_eager"
    x = torch.randn(3, device="dipu")
    compile_default.set_fallback_backend("eager")
    before = compile_default.chosen_backends()
    torch.compile(lambda t: t + 1)(x)
    assert chosen_since(before) == {"eager": 1}
    compile_default.set_fallback_backend("no_such_backend")
    with pytest.raises(Exception, match="'no_such_backend'.*DIPU_COMPILE_BACKEND"):
        torch.compile(lambda t: t - 1)(x)


def test_fallback_backend_environment_variable(monkeypatch):
    monkeypatch.setenv("DIPU_COMPILE_BACKEND", " eager ")
    assert DipuConfig.from_env().compile_backend == "eager"
    monkeypatch.delenv("DIPU_COMPILE_BACKEND")
    assert DipuConfig.from_env().compile_backend == ""


def test_install_is_idempotent_and_uninstall_restores():
    wrapper = torch.compile
    original = wrapper.__device_aware_original__
    compile_default.install()
    assert torch.compile is wrapper
    assert wrapper.__wrapped__ is original and wrapper.__name__ == "compile"
    try:
        compile_default.uninstall()
        assert torch.compile is original
    finally:
        compile_default.install()
    assert torch.compile is not wrapper and torch.compile.__device_aware_original__ is original
    torch.compile = wrapper  # the object other modules may have looked up


def test_graph_breaks_run_the_dipu_dispatcher_eagerly():
    """Inside a graph break dipu operators run eagerly: dynamo compiles the user's frames, never torch_dipu's
    dispatcher or kernels (it would otherwise trace them into graphs of host operators)."""

    def f(t):
        y = t.sin() + 1
        torch._dynamo.graph_break()
        z = torch.ones(3, device="dipu") * 2 + torch.tensor([1.0, 2.0, 3.0], device="dipu")
        scale = z.sum().item()  # breaks the graph; runs aten._local_scalar_dense eagerly on dipu
        return (y * z).cos() * scale

    counter = CompileCounter()
    x = torch.randn(3, device="dipu")
    torch.testing.assert_close(torch.compile(f, backend=counter)(x).cpu(), f(x).cpu())
    assert counter.frame_count == 3


def test_fake_tensors_of_dipu_constants_are_on_dipu():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        const = torch.tensor([1.0, 2.0], device="dipu")
        assert const.device.type == "dipu" and type(const) is not DipuTensor
        assert torch.cat([const, mode.from_tensor(torch.ones(2, device="dipu"))]).device.type == "dipu"


def test_cuda_written_training_compiles_under_ditorch():
    """``import ditorch``: ``model.cuda()`` + ``torch.compile(model)`` trains on the device like the CPU."""
    pytest.importorskip("ditorch")
    code = textwrap.dedent("""
        import copy, json
        import torch, ditorch
        from torch_dipu import compile_default

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        x, y = torch.randn(16, 8), torch.randn(16, 1)

        def train(model, device, compiled):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            run = torch.compile(model) if compiled else model
            xs, ys = x.to(device), y.to(device)
            losses = []
            for _ in range(3):
                loss = torch.nn.functional.mse_loss(run(xs), ys)
                loss.backward(); opt.step(); opt.zero_grad()
                losses.append(loss.item())
            return losses

        reference = train(copy.deepcopy(model), "cpu", compiled=False)
        model = model.cuda()
        losses = train(model, "cuda", compiled=True)
        print(json.dumps({"device": str(next(model.parameters()).device), "cpu": reference, "cuda": losses,
                          "chosen": dict(compile_default.chosen_backends())}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DITORCH_", "DIPU_", "DROPLET_"))}
    env["DITORCH_QUIET"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["device"].startswith("dipu") or result["device"].startswith("cuda")
    # the vendor's default: dicp's onnxgraph graph compiler when it can run (cuda mapped to dipu by ditorch)
    onnx_installed = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))
    assert result["chosen"] == {"onnxgraph" if onnx_installed else "aot_eager": 1}
    torch.testing.assert_close(torch.tensor(result["cuda"]), torch.tensor(result["cpu"]))
