"""The kernel registry: vendor kernels per device type with the reference behind every operator,
``DLINFER_KERNELS=reference``, a broken vendor entry point, and graph mode (each operator one graph node)."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

import dlinfer
import dlinfer.registry as registry_module
from diopi.compare import all_passed, compare_outputs
from dlinfer.config import reset_config
from dlinfer.ops import llm
from dlinfer.registry import KernelRegistry, registry


@pytest.fixture
def kernels_env():
    """Set ``DLINFER_KERNELS`` for one test; the configuration and the resolved kernels are restored after."""
    saved = os.environ.get("DLINFER_KERNELS")

    def set_value(value: str) -> None:
        os.environ["DLINFER_KERNELS"] = value
        reset_config()
        registry.forget()

    yield set_value
    if saved is None:
        os.environ.pop("DLINFER_KERNELS", None)
    else:
        os.environ["DLINFER_KERNELS"] = saved
    reset_config()
    registry.forget()


class _EntryPoint:
    def __init__(self, name: str, fn) -> None:
        self.name, self.value, self._fn = name, f"fake:{name}", fn

    def load(self):
        return self._fn


def _vendor_registry(monkeypatch, *vendors: _EntryPoint) -> KernelRegistry:
    """A fresh registry whose entry points are ``vendors``, with reference kernels ``double`` and ``negate``."""
    monkeypatch.setattr(registry_module, "entry_points", lambda group: list(vendors))
    reg = KernelRegistry()
    reg.register_reference("double")(lambda x: x * 2)
    reg.register_reference("negate")(lambda x: -x)
    return reg


def _fake_vendor(reg: KernelRegistry) -> None:
    reg.register("double", device_type="cpu", name="fake")(lambda x: x + x + 100)


def test_vendor_kernel_where_registered_reference_elsewhere(monkeypatch, kernels_env):
    reg = _vendor_registry(monkeypatch, _EntryPoint("fake", _fake_vendor))
    x = torch.ones(2)
    assert reg.dispatch("double", "cpu", x).tolist() == [102.0, 102.0]   # the vendor's kernel
    assert reg.dispatch("negate", "cpu", x).tolist() == [-1.0, -1.0]     # the vendor lacks it: reference
    assert reg.dispatch("double", "meta", x).tolist() == [2.0, 2.0]      # another device type: reference
    assert reg.counts == {("double", "fake"): 1, ("negate", "reference"): 1, ("double", "reference"): 1}
    kernels_env("reference")
    reg.forget()
    assert reg.kernel("double", "cpu")[0] == "reference"
    with pytest.raises(KeyError, match="no_such_op"):
        reg.kernel("no_such_op", "cpu")


def test_broken_vendor_warns_and_the_reference_serves(monkeypatch):
    def broken(reg: KernelRegistry) -> None:
        raise ImportError("libfake.so not found")

    reg = _vendor_registry(monkeypatch, _EntryPoint("broken", broken), _EntryPoint("fake", _fake_vendor))
    with pytest.warns(UserWarning, match="broken.*libfake.so not found"):
        assert reg.kernel("negate", "cpu")[0] == "reference"
    assert reg.kernel("double", "cpu")[0] == "fake"  # the other vendor still registered


def test_dlinfer_kernels_reference_forces_the_reference_on_dipu(kernels_env):
    pytest.importorskip("torch_dipu")
    x, w = torch.randn(3, 16).to("dipu"), torch.randn(16).to("dipu")
    dlinfer.reset_counts()
    vendor = llm.rms_norm(x, w, 1e-6)
    llm.fused_moe(torch.randn(2, 8).to("dipu"), torch.randn(2, 12, 8).to("dipu"), torch.randn(2, 8, 6).to("dipu"),
                  torch.ones(2, 1).to("dipu"), torch.zeros(2, 1, dtype=torch.int64).to("dipu"), 1)
    counts = dlinfer.kernel_counts()
    assert counts[("fused_moe", "reference")] == 1  # no droplet kernel for fused_moe: the reference on dipu
    vendor_name = next(name for (op, name) in counts if op == "rms_norm")
    assert vendor_name != "reference"  # a vendor kernel serves rms_norm on dipu
    kernels_env("reference")
    dlinfer.reset_counts()
    forced = llm.rms_norm(x, w, 1e-6)
    assert dlinfer.kernel_counts() == {("rms_norm", "reference"): 1}
    assert forced.device.type == "dipu"
    assert all_passed(compare_outputs(forced.cpu(), vendor.cpu()))
    kernels_env("nonsense")
    with pytest.raises(ValueError, match="DLINFER_KERNELS"):
        llm.rms_norm(x, w, 1e-6)


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference_mode"])
def test_dipu_tensors_reach_the_vendor_kernel_in_every_grad_mode(mode):
    """The registry's kernel sits on PrivateUse1 too, so a dipu call reaches droplet's kernel even where the autograd
    keys are skipped (inference_mode), instead of the reference on the host copies."""
    pytest.importorskip("torch_dipu")
    context = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    x, w = torch.randn(4, 8).to("dipu"), torch.ones(8).to("dipu")
    dlinfer.reset_counts()
    with context():
        out = llm.rms_norm(x, w, 1e-6)
    assert dlinfer.kernel_counts() == {("rms_norm", "droplet"): 1}
    assert out.device.type == "dipu"
    assert all_passed(compare_outputs(out.cpu(), llm.rms_norm(x.cpu(), w.cpu(), 1e-6)))


def test_compiled_dipu_call_under_inference_mode_is_one_node_and_reaches_the_vendor():
    pytest.importorskip("torch_dipu")
    graphs: list[torch.fx.Graph] = []

    def recording(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm.graph)
        return gm.forward

    def step(h, w):
        return llm.rms_norm(h * 2, w, 1e-6)

    x, w = torch.randn(4, 8).to("dipu"), torch.ones(8).to("dipu")
    torch._dynamo.reset()
    dlinfer.reset_counts()
    with torch.inference_mode():
        out = torch.compile(step, backend=recording, fullgraph=True)(x, w)
    torch._dynamo.reset()
    targets = [str(n.target) for graph in graphs for n in graph.nodes if n.op == "call_function"]
    assert sum("dlinfer.rms_norm" in t for t in targets) == 1, targets
    assert dlinfer.kernel_counts() == {("rms_norm", "droplet"): 1}
    assert all_passed(compare_outputs(out.cpu(), llm.rms_norm(x.cpu() * 2, w.cpu(), 1e-6)))


def test_graph_mode_keeps_each_operator_one_node():
    graphs: list[torch.fx.Graph] = []

    def recording(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm.graph)
        return gm.forward

    def step(h, w, q, kc, vc, table, lens):
        h = llm.rms_norm(h, w, 1e-6)
        return h, llm.paged_decode_attention(q, kc, vc, table, 4, lens, 8, 4, 2)

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 16, generator=g), torch.randn(16, generator=g), torch.randn(2, 4, 8, generator=g),
            torch.randn(4, 4, 2, 8, generator=g), torch.randn(4, 4, 2, 8, generator=g),
            torch.tensor([[2, 0], [3, 1]], dtype=torch.int32), torch.tensor([5, 8]))
    eager = step(*args)
    torch._dynamo.reset()
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)(*args)
    assert all_passed(compare_outputs(compiled, eager))
    torch._dynamo.reset()
    torch.compile(step, backend=recording, fullgraph=True)(*args)
    targets = [str(n.target) for graph in graphs for n in graph.nodes if n.op == "call_function"]
    assert sum("dlinfer.rms_norm" in t for t in targets) == 1, targets
    assert sum("dlinfer.paged_decode_attention" in t for t in targets) == 1, targets
    torch._dynamo.reset()


def test_every_operator_has_a_reference_kernel(kernels_env):
    from dlinfer.ops.library import defined_ops

    kernels_env("reference")
    ops = defined_ops()
    assert len(ops) == 17
    assert all(registry.kernel(op, "cpu")[0] == "reference" for op in ops)
