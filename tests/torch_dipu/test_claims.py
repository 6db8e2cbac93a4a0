"""Composite operators of the DIOPI table run on dipu as themselves (torch_dipu.claims): the vendor's kernel is
called forward and backward, and results and gradients stay bitwise equal to the CPU's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import diopi
import torch_dipu
from diopi import DiopiFunction, registry
from torch_dipu import claim_backward, claims, dispatch
from torch_dipu.vendors import droplet


@contextlib.contextmanager
def served(name: str, packet: str, tags: frozenset[str] = frozenset()) -> Iterator[str]:
    """Make sure the table has a function serving ``packet`` (adding ``name`` for this block when it has none) and
    that torch_dipu claims it, as it would at import; yields the function's name."""
    fn = diopi.function_for_aten(packet)
    added = fn is None
    if added:
        if name in registry._FUNCTIONS:
            name += "Composite"
        fn = diopi.register_function(DiopiFunction(name, f"{name}(...)", (packet,), tags, family="test"))
    new = claims.claim_table()
    dispatch.clear_handlers()
    try:
        yield fn.name
    finally:
        new.release()
        if added:
            del registry._FUNCTIONS[fn.name]
            del registry._BY_ATEN_PACKET[packet]
        dispatch.clear_handlers()


def _grads(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], device: str,
           autocast: torch.dtype | None) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """``fn``'s result and the gradients of its floating-point inputs; on dipu under ``torch.autocast("dipu",
    autocast)``, on the CPU with the floating-point inputs cast to ``autocast`` by hand."""
    leaves = [t.clone().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
    if device == "cpu" and autocast is not None:
        args = [t.to(autocast) if t.is_floating_point() else t for t in leaves]
    else:
        args = leaves
    with torch.autocast("dipu", dtype=autocast or torch.bfloat16, enabled=device == "dipu" and autocast is not None):
        out = fn(*args)
    out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(device))
    return out.detach().cpu(), [t.grad.cpu() if t.grad is not None else None for t in leaves]


def _inputs(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def _targets(n: int, classes: int, ignore: int | None = None) -> torch.Tensor:
    t = torch.arange(n) * 7 % classes
    if ignore is not None:
        t[::3] = ignore
    return t


# (id, table function and packet the call must reach, the call, its inputs)
CASES = [
    ("silu", ("diopiSiluBackward", "silu_backward"), F.silu, _inputs((6, 9))),
    ("mish", ("diopiMishBackward", "mish_backward"), F.mish, _inputs((6, 9))),
    ("linear_2d", ("diopiLinear", "linear"), F.linear, _inputs((8, 16), (4, 16), (4,))),
    ("linear_2d_no_bias", ("diopiLinear", "linear"), F.linear, _inputs((8, 16), (4, 16))),
    ("linear_3d", ("diopiLinear", "linear"), F.linear, _inputs((2, 5, 16), (4, 16), (4,))),
    ("linear_3d_no_bias", ("diopiLinear", "linear"), F.linear, _inputs((2, 5, 16), (4, 16))),
    ("cross_entropy", ("diopiCrossEntropyLoss", "cross_entropy_loss"),
     lambda x, t: F.cross_entropy(x, t), [*_inputs((12, 5)), _targets(12, 5)]),
    ("cross_entropy_smoothing", ("diopiCrossEntropyLoss", "cross_entropy_loss"),
     lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), [*_inputs((12, 5)), _targets(12, 5)]),
    ("cross_entropy_ignore_index", ("diopiCrossEntropyLoss", "cross_entropy_loss"),
     lambda x, t: F.cross_entropy(x, t, ignore_index=-100), [*_inputs((12, 5)), _targets(12, 5, ignore=-100)]),
    ("cross_entropy_weight_all", ("diopiCrossEntropyLoss", "cross_entropy_loss"),
     lambda x, t, w: F.cross_entropy(x, t, weight=w.detach().abs(), ignore_index=3, label_smoothing=0.2),
     [*_inputs((12, 5)), _targets(12, 5, ignore=3), *_inputs((5,), seed=1)]),
    ("cross_entropy_3d_sum", ("diopiCrossEntropyLoss", "cross_entropy_loss"),
     lambda x, t: F.cross_entropy(x, t, reduction="sum"), [*_inputs((3, 5, 4)), _targets(12, 5).reshape(3, 4)]),
    ("rms_norm", ("diopiRMSNorm", "rms_norm"), lambda x, w: F.rms_norm(x, (16,), w, 1e-6), _inputs((4, 16), (16,))),
    ("layer_norm", ("diopiLayerNorm", "native_layer_norm"), lambda x, w, b: F.layer_norm(x, (16,), w, b),
     _inputs((4, 16), (16,), (16,))),
]


@pytest.mark.parametrize("autocast", [None, torch.bfloat16], ids=["float32", "autocast_bf16"])
@pytest.mark.parametrize(("served_by", "call", "inputs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_claimed_call_reaches_the_vendor_and_matches_the_cpu_bitwise(served_by: tuple[str, str], call: Callable,
                                                                    inputs: list[torch.Tensor],
                                                                    autocast: torch.dtype | None) -> None:
    with served(*served_by) as name, torch_dipu.count_function_calls() as calls:
        out, grads = _grads(call, inputs, "dipu", autocast)
    assert calls[name] >= 1, calls
    # the CPU takes the dtype dipu's autocast policy gave the call (bfloat16 for linear, float32 for losses)
    want_out, want_grads = _grads(call, inputs, "cpu", out.dtype if autocast else None)
    assert out.dtype == want_out.dtype and torch.equal(out, want_out)
    for got, want in zip(grads, want_grads, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.dtype == want.dtype and torch.equal(got, want), (got - want).abs().max()


@pytest.mark.parametrize(("served_by", "call", "inputs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_repeated_backward_runs_the_traced_decomposition_bitwise(served_by: tuple[str, str], call: Callable,
                                                                  inputs: list[torch.Tensor]) -> None:
    """A call signature's second backward traces the decomposition's backward once (torch_dipu.claim_backward);
    it and every later one run the traced graph: the gradients stay the CPU's bit for bit."""
    claim_backward.clear()
    with served(*served_by):
        runs = [_grads(call, inputs, "dipu", None) for _ in range(3)]
        traced = claim_backward.traced_graphs()
    # linear, cross_entropy and rms_norm need gradients through the claim; silu's and layer_norm's claimed
    # overloads are their backward functions, which autograd calls without gradients
    assert traced == (served_by[1] in ("linear", "cross_entropy_loss", "rms_norm"))
    want_out, want_grads = _grads(call, inputs, "cpu", None)
    for out, grads in runs:
        assert torch.equal(out, want_out)
        for got, want in zip(grads, want_grads, strict=True):
            assert (got is None) == (want is None)
            if got is not None:
                assert torch.equal(got, want), (got - want).abs().max()


def test_the_traced_backward_ignores_an_enclosing_autocast() -> None:
    """A backward run inside ``torch.autocast``: the traced graph's multiplies stay float32, as the recomputing
    backward's (autocast acts at the claimed operator's boundary only)."""
    claim_backward.clear()
    x0, w0 = _inputs((2, 5, 16), (4, 16))
    grads = []
    for _ in range(3):
        x, w = x0.clone().to("dipu").requires_grad_(), w0.clone().to("dipu").requires_grad_()
        out = F.linear(x, w)
        with torch.autocast("dipu", dtype=torch.bfloat16):
            out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape).to("dipu"))
        grads.append((x.grad.cpu(), w.grad.cpu()))
    assert claim_backward.traced_graphs() == 1
    assert all(g.dtype == torch.float32 for pair in grads for g in pair)
    assert all(torch.equal(a, b) for pair in grads[1:] for a, b in zip(pair, grads[0], strict=True))


def test_the_traced_backward_of_linear_does_not_repeat_its_multiply() -> None:
    """The recomputing backward runs linear's forward multiply again (three ``mm``); the traced one has only the
    two gradient multiplies."""
    claim_backward.clear()
    x = torch.randn(2, 5, 16).to("dipu").requires_grad_()
    w = torch.randn(4, 16).to("dipu").requires_grad_()
    mms = []
    for _ in range(3):
        out = F.linear(x, w)
        with torch_dipu.count_function_calls() as calls:
            out.backward(torch.ones_like(out))
        mms.append(calls["diopiMm"])
    assert mms == [3, 2, 2]


def test_double_backward_and_watching_modes_keep_the_recomputing_backward() -> None:
    """``create_graph=True`` recomputes on the graph (second-order gradients stay the CPU's while traced graphs
    serve the first-order passes); under a dispatch mode no trace is made or used (the mode sees the recomputation,
    as before)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            self.ops.append(func.__name__)
            return func(*args, **(kwargs or {}))

    x0, w0 = _inputs((3, 8), (4, 8))
    results = {}
    for device in ("cpu", "dipu"):
        claim_backward.clear()
        x, w = x0.clone().to(device).requires_grad_(), w0.clone().to(device).requires_grad_()
        for _ in range(3):
            (gx,) = torch.autograd.grad(F.linear(x, w).pow(2).sum(), x, create_graph=True)
            gx.sum().backward()
        results[device] = (gx.detach().cpu(), x.grad.cpu(), w.grad.cpu())
    assert all(torch.equal(a, b) for a, b in zip(results["cpu"], results["dipu"], strict=True))
    claim_backward.clear()
    x, w = x0.clone().to("dipu").requires_grad_(), w0.clone().to("dipu").requires_grad_()
    for _ in range(3):
        out = F.linear(x, w)
        with Seen() as seen:
            out.backward(torch.ones_like(out))
        assert seen.ops.count("mm.default") == 3
    assert claim_backward.traced_graphs() == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_activation_backward_is_the_cpus_fused_kernel(dtype: torch.dtype) -> None:
    (x,) = _inputs((64, 33))
    for act, packet in ((F.silu, "silu_backward"), (F.mish, "mish_backward")):
        with served(f"diopi{packet.title().replace('_', '')}", packet):
            xd = x.to(dtype).dipu().requires_grad_()
            act(xd).sum().backward()
        xc = x.to(dtype).requires_grad_()
        act(xc).sum().backward()
        assert torch.equal(xd.grad.cpu(), xc.grad), packet


def test_linear_forward_runs_the_vendors_linear_not_addmm() -> None:
    x, w, b = _inputs((8, 16), (4, 16), (4,))
    x, w, b = x.dipu(), w.dipu(), b.dipu()
    with served("diopiLinear", "linear") as name:
        with torch_dipu.count_function_calls() as calls:
            F.linear(x, w, b)
        assert calls == {name: 1}
        with droplet.switches(faults="linear:bias:0.5"):
            got = F.linear(x, w, b).cpu()
        assert torch.equal(got, F.linear(x.cpu(), w.cpu(), b.cpu()) + 0.5)


def test_double_backward_goes_through_the_decomposition() -> None:
    x, w, b = _inputs((8, 16), (4, 16), (4,))
    results = []
    for device in ("dipu", "cpu"):
        xs, ws = x.to(device, copy=True).requires_grad_(), w.to(device, copy=True).requires_grad_()
        y = F.silu(F.linear(xs, ws, b.to(device)))
        (gx,) = torch.autograd.grad(y.square().sum(), xs, create_graph=True)
        gx.sum().backward()
        results.append([t.detach().cpu() for t in (gx, xs.grad, ws.grad)])
    with served("diopiLinear", "linear"):
        xs, ws = x.dipu().requires_grad_(), w.dipu().requires_grad_()
        y = F.silu(F.linear(xs, ws, b.dipu()))
        (gx,) = torch.autograd.grad(y.square().sum(), xs, create_graph=True)
        gx.sum().backward()
        results.append([t.detach().cpu() for t in (gx, xs.grad, ws.grad)])
    for dipu in (results[0], results[2]):
        for got, want in zip(dipu, results[1], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_no_grad_and_inference_mode_reach_the_vendor_too() -> None:
    (x,) = _inputs((5, 7))
    g = torch.ones(5, 7)
    xd, gd = x.dipu().requires_grad_(), g.dipu()
    for context in (torch.no_grad, torch.inference_mode):
        with context(), torch_dipu.count_function_calls() as calls:
            got = torch.ops.aten.silu_backward(gd, xd)
        assert calls == {"diopiSiluBackward": 1} and torch.equal(got.cpu(), torch.ops.aten.silu_backward(g, x))


def test_every_claimable_composite_overload_of_the_table_is_claimed() -> None:
    composite, claimed, left = [], [], []
    for fn in diopi.functions():
        for packet in fn.aten:
            for op in claims.dispatcher_overloads(packet):
                if not claims.is_composite(op):
                    continue
                composite.append(op)
                (claimed if claims.is_claimed(op) else left).append(op)
    assert torch.ops.aten.silu_backward.default in claimed
    assert all(claims.unclaimable_reason(op) for op in left), [str(op) for op in left]
    assert torch.ops.aten.max.out in left and claims.unclaimable_reason(torch.ops.aten.max.out).startswith("writes")


def test_functions_added_to_the_table_are_claimed_and_released() -> None:
    op = torch.ops.aten.mish_backward.default
    before = claims.is_claimed(op)
    with served("diopiMishBackward", "mish_backward"):
        assert claims.is_claimed(op)
    assert claims.is_claimed(op) == before


def test_fake_tensors_keep_pytorchs_decomposition() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(3, 4, device="dipu"))
        out = torch.ops.aten.silu_backward(x, x)
    assert out.shape == (3, 4) and out.device.type == "dipu"


def test_reachability_says_why_a_packet_is_not_reached() -> None:
    report = torch_dipu.reachability()
    assert all(p.reachable for packets in report.values() for p in packets)
    added = [diopi.register_function(DiopiFunction(f"diopiTest{i}", f"diopiTest{i}(...)", (packet,)))
             for i, packet in enumerate(("reshape", "mish_backward")) if diopi.function_for_aten(packet) is None]
    try:
        for fn in added:  # a view, and a composite packet added to the table after import: neither is claimed
            (packet,) = torch_dipu.reachability()[fn.name]
            why = "returns a view of an input" if fn.aten == ("reshape",) else "not claimed"
            assert not packet.reachable and packet.reason == f"aten::{fn.aten[0]} decomposes: {why}"
        torch_dipu.set_force_fallback("silu_backward")
        (forced,) = torch_dipu.reachability()["diopiSiluBackward"]
        assert not forced.reachable and forced.reason == "forced to the CPU by DIPU_FORCE_FALLBACK_OPS_LIST"
    finally:
        for fn in added:
            del registry._FUNCTIONS[fn.name]
            del registry._BY_ATEN_PACKET[fn.aten[0]]


@pytest.mark.parametrize("call", [lambda t: F.linear(t, t), lambda t: torch.max(t, t.flip(0)).square()],
                         ids=["linear_x_x", "max_other"])
def test_a_tensor_passed_twice_gets_its_gradient_once_with_create_graph(call: Callable) -> None:
    (x,) = _inputs((6, 6))
    results = []
    for device in ("dipu", "cpu"):
        xs = x.to(device, copy=True).requires_grad_()
        (gx,) = torch.autograd.grad(call(xs).sum(), xs, create_graph=True)
        gx.square().sum().backward()
        results.append([t.detach().cpu() for t in (gx, xs.grad)])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_claimed_gradients_use_the_cpus_kernel_not_a_python_decomposition() -> None:
    # torch._decomp registers a Python rewrite of upsample_bilinear2d.vec; the CPU runs the C++ kernel
    x, g = _inputs((2, 3, 5, 5), (2, 3, 12, 12))
    assert claims.is_claimed(torch.ops.aten.upsample_bilinear2d.vec)
    grads = []
    for device in ("dipu", "cpu"):
        xs = x.to(device, copy=True).requires_grad_()
        F.interpolate(xs, scale_factor=2.5, mode="bilinear").backward(g.to(device))
        grads.append(xs.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
