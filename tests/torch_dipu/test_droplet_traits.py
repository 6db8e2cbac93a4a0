"""droplet's traits: unsupported dtypes, matmul precision, device count, malformed settings."""

from __future__ import annotations

import pytest
import torch

from torch_dipu import UnsupportedDtypeError
from torch_dipu.vendors import droplet
from torch_dipu.vendors.droplet import DropletTraits


def test_unsupported_dtype_python_switch():
    x64 = torch.ones(3, dtype=torch.float64, device="dipu")
    x32 = torch.ones(3, device="dipu")
    with droplet.switches(unsupported_dtypes={torch.float64}):
        with pytest.raises(UnsupportedDtypeError, match=r"aten\.add\.Tensor.*torch\.float64"):
            torch.add(x64, x64)
        with pytest.raises(UnsupportedDtypeError, match=r"aten\.mul\.Tensor.*torch\.float64"):
            x64.mul(x64)
        assert torch.equal((x32 + x32).cpu(), torch.full((3,), 2.0))
    assert torch.equal((x64 + x64).cpu(), torch.full((3,), 2.0, dtype=torch.float64))


def test_unsupported_dtype_and_device_count_from_env(run_python):
    out = run_python(
        """
        import torch, torch_dipu
        print("COUNT", torch.dipu.device_count(), torch.accelerator.device_count())
        x = torch.ones(3, device="dipu")
        print("F32", (x * 2).sum().item())
        try:
            torch.ones(3, dtype=torch.float64, device="dipu")
        except torch_dipu.UnsupportedDtypeError as e:
            print("ERR", e)
        try:
            x.double()
        except torch_dipu.UnsupportedDtypeError as e:
            print("ERR2", e)
        """,
        env={"DROPLET_UNSUPPORTED_DTYPES": "float64", "DROPLET_DEVICE_COUNT": "3"},
    )
    assert "COUNT 3 3" in out.stdout
    assert "F32 6.0" in out.stdout
    assert "ERR " in out.stdout and "float64" in out.stdout.split("ERR ")[1].splitlines()[0]
    assert "ERR2 " in out.stdout and "float64" in out.stdout.split("ERR2 ")[1]


@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
def test_matmul_precision(precision):
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    want = a.double() @ b.double()
    with droplet.switches(matmul_precision=precision):
        got = (a.dipu() @ b.dipu()).cpu().double()
    rel = ((got - want).abs().max() / want.abs().max()).item()
    cpu_rel = (((a @ b).double() - want).abs().max() / want.abs().max()).item()
    if precision == "highest":
        assert rel <= 2 * cpu_rel + 1e-7
    elif precision == "high":  # tf32: 10 mantissa bits
        assert 1e-5 < rel < 5e-3, rel
    else:  # bf16: 7 mantissa bits
        assert 1e-4 < rel < 3e-2, rel
    if precision == "medium":
        assert rel > 4 * cpu_rel


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("DROPLET_DEVICE_COUNT", "two"),
        ("DROPLET_MEMORY_CAPACITY", "lots"),
        ("DROPLET_UNSUPPORTED_DTYPES", "float65"),
        ("DROPLET_MATMUL_PRECISION", "ultra"),
    ],
)
def test_malformed_env_values_name_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as info:
        DropletTraits.from_env()
    message = str(info.value)
    assert value in message
    assert var in message or var.removeprefix("DROPLET_").lower() in message, message


def test_malformed_env_fails_import(run_python):
    out = run_python("import torch_dipu", env={"DROPLET_DEVICE_COUNT": "two"}, check=False)
    assert out.returncode != 0
    assert "DROPLET_DEVICE_COUNT" in out.stderr and "'two'" in out.stderr


def test_bad_python_switches():
    with pytest.raises(ValueError, match="matmul_precision"):
        droplet.configure(matmul_precision="ultra")
    with pytest.raises(ValueError, match="no switch"):
        droplet.configure(warp_speed=True)


def test_unsupported_dtype_message_survives_operator_syntax():
    # A TypeError would be turned into "unsupported operand type(s)" by Tensor.__add__.
    x64 = torch.ones(3, dtype=torch.float64, device="dipu")
    with droplet.switches(unsupported_dtypes={torch.float64}), pytest.raises(UnsupportedDtypeError, match="float64"):
        x64 + x64


def test_unsupported_dtype_covers_torch_dipus_own_allocations_but_not_host_scalars():
    x = torch.ones(3, device="dipu")
    y = torch.ones(3, dtype=torch.float64, device="dipu")  # made before the switch
    with droplet.switches(unsupported_dtypes={torch.float64}):
        with pytest.raises(UnsupportedDtypeError, match="float64"):
            torch.empty_like(x, dtype=torch.float64)
        with pytest.raises(UnsupportedDtypeError, match="float64"):
            x.new_empty(3, dtype=torch.float64)
        assert (x + torch.tensor(1.0, dtype=torch.float64)).dtype == torch.float32  # a host scalar is a number
        assert torch.equal(y.cpu(), torch.ones(3, dtype=torch.float64))  # copying to the host is a transfer


def test_a_rejected_configure_changes_nothing():
    rt = droplet.runtime()
    before = (rt.traits.matmul_precision, list(rt.faults))
    with pytest.raises(ValueError, match="matmul_precision 'bogus'"):
        droplet.configure(faults="mm:bias", matmul_precision="bogus")
    with pytest.raises(ValueError, match="no switch 'validate'"):
        droplet.configure(validate=1)
    assert (rt.traits.matmul_precision, list(rt.faults)) == before
    ones = torch.ones(2, 2, device="dipu")
    assert torch.equal(torch.mm(ones, ones).cpu(), torch.full((2, 2), 2.0))
