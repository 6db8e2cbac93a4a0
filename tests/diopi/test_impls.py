"""diopi.impls: discovery of vendor implementations, per-function registration, and droplet's kernels reached
without torch_dipu (traits, faults by ATen or DIOPI name, the grad fault outside autograd)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest
import torch

import diopi.impls
from diopi import UnknownFunctionError, get_function
from diopi.impl.droplet import DropletImpl
from diopi.impls import FunctionImpls, ImplementationError, UnsupportedDtypeError

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DROPLET_"):
            monkeypatch.delenv(name)


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch):
    """Make extra entry points of group ``diopi.impls`` visible: ``install(name="module:attr", ...)``."""
    def add(**extra: str) -> None:
        real = list(diopi.impls.entry_points(group=diopi.impls.GROUP))
        fake = [EntryPoint(name, value, diopi.impls.GROUP) for name, value in extra.items()]
        monkeypatch.setattr(diopi.impls, "entry_points", lambda group: [*real, *fake])
    return add


def _call(impl, function: str, op, *args, **kwargs):
    kernel = impl.kernel(get_function(function), op)
    assert kernel is not None, f"{impl.name} does not implement {function}"
    return kernel(op, *args, **kwargs)


def _inputs(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


# -- a fake vendor registered per function -----------------------------------------------------------------------
CALLS: list[str] = []


def fake_vendor(**options) -> FunctionImpls:
    """The factory a fake vendor package would name in its entry point."""
    impl = FunctionImpls("fakechip")

    @impl.register("diopiAdd")
    def add(op, *args, **kwargs):
        CALLS.append(str(op))
        return op(*args, **kwargs) * options.get("scale", 1)

    impl.register("diopiMul", lambda op, *args, **kwargs: op(*args, **kwargs))
    return impl


def test_droplet_is_installed_and_unknown_names_list_the_available_ones() -> None:
    assert "droplet" in diopi.impls.available()
    with pytest.raises(ImplementationError, match=r"unknown DIOPI implementation 'nochip'.*available: .*droplet"):
        diopi.impls.load("nochip")


def test_fake_vendor_registered_per_function(install) -> None:
    install(fakechip=f"{__name__}:fake_vendor")
    assert "fakechip" in diopi.impls.available()
    impl = diopi.impls.load("fakechip", scale=3)
    assert impl.name == "fakechip" and impl.functions() == ["diopiAdd", "diopiMul"]
    a, b = _inputs(4, 5)
    CALLS.clear()
    torch.testing.assert_close(_call(impl, "diopiAdd", aten.add.Tensor, a, b, alpha=2), (a + 2 * b) * 3)
    torch.testing.assert_close(_call(impl, "diopiAdd", aten.add.Scalar, a, 1.5), (a + 1.5) * 3)
    assert CALLS == ["aten.add.Tensor", "aten.add.Scalar"]  # one kernel serves every overload of the function
    torch.testing.assert_close(_call(impl, "diopiMul", aten.mul.Tensor, a, b), a * b)
    assert impl.kernel(get_function("diopiSub"), aten.sub.Tensor) is None  # not implemented


def test_registering_an_unknown_function_fails() -> None:
    with pytest.raises(UnknownFunctionError, match="diopiNoSuchThing"):
        FunctionImpls("x").register("diopiNoSuchThing", lambda op, *a: None)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no_such_vendor_module:impl", r"'broken': entry point 'no_such_vendor_module:impl' cannot be loaded.*"
                                       r"ModuleNotFoundError"),
        ("os:sep", r"'broken': entry point 'os:sep' is not callable"),
        ("builtins:dict", r"'broken': entry point 'builtins:dict' returned dict, which has no name and kernel"),
    ],
)
def test_broken_entry_point_is_named(install, value: str, message: str) -> None:
    install(broken=value)
    with pytest.raises(ImplementationError, match=message):
        diopi.impls.load("broken")


# -- droplet without torch_dipu ----------------------------------------------------------------------------------
def test_droplet_clean_kernels_are_the_reference() -> None:
    impl = diopi.impls.load("droplet")
    assert isinstance(impl, DropletImpl) and impl.faults == ()
    a, b = _inputs(6, 7)
    assert torch.equal(_call(impl, "diopiAdd", aten.add.Tensor, a, b), a + b)
    assert torch.equal(_call(impl, "diopiMm", aten.mm.default, a, b.T), a @ b.T)


@pytest.mark.parametrize("pattern", ["silu_backward", "aten.silu_backward", "diopiSiluBackward", "diopiSilu.*"])
def test_fault_pattern_names_the_aten_op_or_the_diopi_function(pattern: str) -> None:
    impl = diopi.impls.load("droplet", faults=f"{pattern}:bias:0.5")
    grad, x = _inputs(3, 4)
    expected = aten.silu_backward.default(grad, x)
    assert torch.equal(_call(impl, "diopiSiluBackward", aten.silu_backward.default, grad, x), expected + 0.5)
    assert torch.equal(_call(impl, "diopiAdd", aten.add.Tensor, grad, x), grad + x)  # others untouched
    if not pattern.startswith("diopiSilu"):
        assert torch.equal(_call(impl, "diopiSilu", aten.silu.default, x), aten.silu.default(x))


def test_grad_fault_without_autograd_scales_backward_functions_only() -> None:
    impl = diopi.impls.load("droplet", faults="diopiSiluBackward:grad:3,mul.Tensor:grad:3")
    grad, x = _inputs(3, 4)
    result = _call(impl, "diopiSiluBackward", aten.silu_backward.default, grad, x)
    torch.testing.assert_close(result, 3 * aten.silu_backward.default(grad, x))
    assert torch.equal(_call(impl, "diopiMul", aten.mul.Tensor, grad, x), grad * x)  # a forward function


def test_droplet_reads_its_environment_and_keywords_override_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DROPLET_FAULTS", "mul.Tensor:bias")
    monkeypatch.setenv("DROPLET_UNSUPPORTED_DTYPES", "float64")
    monkeypatch.setenv("DROPLET_MATMUL_PRECISION", "medium")
    a, b = _inputs(64, 64)
    impl = diopi.impls.load("droplet")
    assert torch.equal(_call(impl, "diopiMul", aten.mul.Tensor, a, b), a * b + 1)
    with pytest.raises(UnsupportedDtypeError, match=r"aten\.add\.Tensor.*torch\.float64"):
        _call(impl, "diopiAdd", aten.add.Tensor, a.double(), b.double())
    exact = a.double() @ b.double()
    low_error = ((_call(impl, "diopiMm", aten.mm.default, a, b) - exact).abs().max() / exact.abs().max()).item()
    assert low_error > 1e-4  # bfloat16 inputs
    clean = diopi.impls.load("droplet", faults="", unsupported_dtypes=[], matmul_precision="highest")
    assert torch.equal(_call(clean, "diopiMul", aten.mul.Tensor, a, b), a * b)
    assert torch.equal(_call(clean, "diopiAdd", aten.add.Tensor, a.double(), b.double()), a.double() + b.double())
    assert ((_call(clean, "diopiMm", aten.mm.default, a, b) - exact).abs().max() / exact.abs().max()).item() < 1e-5


def test_bad_droplet_options_are_named() -> None:
    with pytest.raises(ValueError, match="no switch 'warp_speed'"):
        diopi.impls.load("droplet", warp_speed=True)
    with pytest.raises(ValueError, match="'mm:explode'"):
        diopi.impls.load("droplet", faults="mm:explode")
    with pytest.raises(ValueError, match="'float65'"):
        diopi.impls.load("droplet", unsupported_dtypes="float65")


def test_dipu_runs_the_same_droplet_kernels() -> None:
    """torch_dipu's droplet runtime delegates to diopi.impl.droplet: a fault named by its DIOPI function reaches
    dipu, and the runtime's implementation is the one ``diopi.impls.load`` gives."""
    code = textwrap.dedent("""
        import torch, torch_dipu, diopi.impls
        from torch_dipu.vendors import droplet
        a, b = torch.randn(5, 6), torch.randn(5, 6)
        assert torch.equal((a.dipu() * b.dipu()).cpu(), a * b + 0.5)
        assert torch.equal((a.dipu() + b.dipu()).cpu(), a + b)
        assert droplet.runtime().impl == diopi.impls.load("droplet")
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIPU_", "DROPLET_"))}
    env["DROPLET_FAULTS"] = "diopiMul:bias:0.5"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
