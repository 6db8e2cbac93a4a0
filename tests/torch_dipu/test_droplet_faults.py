"""droplet fault injection: each fault changes its operator's result as documented, and only that operator's."""

from __future__ import annotations

import pytest
import torch

import torch_dipu
from torch_dipu.vendors import droplet
from torch_dipu.vendors.droplet import parse_faults


def _inputs():
    torch.manual_seed(0)
    return torch.randn(64, 64), torch.randn(64, 64)


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_bias():
    a, b = _inputs()
    with droplet.switches(faults="mul.Tensor:bias:0.5"):
        _exact(a.dipu() * b.dipu(), a * b + 0.5)
        _exact(a.dipu() + b.dipu(), a + b)


def test_noise():
    a, b = _inputs()
    with droplet.switches(faults="mul.Tensor:noise:0.01"):
        got = (a.dipu() * b.dipu()).cpu()
        _exact(a.dipu() - b.dipu(), a - b)
    want = a * b
    rel = (got - want) / want
    assert (got != want).float().mean() > 0.9
    assert 0.005 < rel.std().item() < 0.02, rel.std()


def test_nan():
    a, b = _inputs()
    with droplet.switches(faults="add.Tensor:nan"):
        got = (a.dipu() + b.dipu()).cpu()
        _exact(a.dipu() * b.dipu(), a * b)
    assert torch.isnan(got).sum().item() == 1 and torch.isnan(got[0, 0])
    mask = ~torch.isnan(got)
    assert torch.equal(got[mask], (a + b)[mask])


def test_noncontig():
    a, b = _inputs()
    with droplet.switches(faults="exp:noncontig"):
        _exact(a.dipu().exp(), a.exp())
        wrong = a.dipu().t().exp().cpu()
        assert not torch.allclose(wrong, a.t().exp())
        _exact(a.dipu().t().contiguous().exp(), a.t().exp())
        _exact(a.dipu().t().sin(), a.t().sin())


def test_inplace_lost():
    with droplet.switches(faults="add_.Tensor:inplace_lost"):
        x = torch.zeros(4, device="dipu")
        y = x + 1
        x.add_(1)
        _exact(x, torch.zeros(4))
        _exact(y, torch.ones(4))
        x.mul_(3).sub_(1)
        _exact(x, torch.full((4,), -1.0))


def test_grad_scales_backward_only():
    a, b = _inputs()
    x = a.dipu().requires_grad_()
    with droplet.switches(faults="mul.Tensor:grad:3"):
        y = x * b.dipu()
        _exact(y.detach(), a * b)
        y.sum().backward()
        _exact(x.grad, 3 * b)
        z = x.detach().requires_grad_()
        z.exp().sum().backward()  # exp's backward is exp(x) * grad: uses mul.Tensor too
        assert torch.allclose(z.grad.cpu(), 3 * a.exp())
        w = x.detach().requires_grad_()
        (w + w).sum().backward()
        _exact(w.grad, torch.full_like(a, 2.0))


def test_slow_measured_by_events():
    x = torch.ones(8, device="dipu")
    start, end = torch.dipu.Event(enable_timing=True), torch.dipu.Event(enable_timing=True)
    with droplet.switches(faults="mul.Tensor:slow:200"):
        start.record()
        y = x * x
        end.record()
        torch.dipu.synchronize()
        slow_ms = start.elapsed_time(end)
        start.record()
        z = x + x
        end.record()
        fast_ms = start.elapsed_time(end)
    assert slow_ms >= 195, slow_ms  # a sleep never wakes early
    assert fast_ms < slow_ms, (fast_ms, slow_ms)  # the unfaulted op is not delayed (compared in the same run)
    _exact(y, torch.ones(8))
    _exact(z, torch.full((8,), 2.0))


def test_faults_from_env(run_python):
    out = run_python(
        """
        import torch, torch_dipu
        x = torch.ones(3, device="dipu")
        print("MUL", (x * x).tolist(), "ADD", (x + x).tolist())
        """,
        env={"DROPLET_FAULTS": " mul.Tensor:bias:2 , sub.*:nan"},
    )
    assert "MUL [3.0, 3.0, 3.0] ADD [2.0, 2.0, 2.0]" in out.stdout


@pytest.mark.parametrize(
    "entry",
    ["mm:explode", "mm:bias:abc", "mm:nan:1", "(mm:bias", ":bias", "mm"],
    ids=["unknown-fault", "bad-param", "param-not-taken", "bad-regex", "missing-pattern", "no-fault"],
)
def test_malformed_entry_raises_naming_it(entry):
    with pytest.raises(ValueError) as info:
        parse_faults(f"add.Tensor:bias,{entry}")
    assert repr(entry) in str(info.value)
    with pytest.raises(ValueError, match="malformed|regular expression|empty|parameter|number"):
        droplet.configure(faults=entry)


def test_malformed_env_entry_fails_import(run_python):
    out = run_python("import torch_dipu", env={"DROPLET_FAULTS": "mm:bias,mm:explode:3"}, check=False)
    assert out.returncode != 0
    assert "'mm:explode:3'" in out.stderr and "DROPLET_FAULTS" in out.stderr


def test_inplace_lost_keeps_the_other_results():
    op = torch.ops.aten._native_batch_norm_legit.default
    x = torch.randn(4, 3)
    running_mean, running_var = torch.zeros(3, device="dipu"), torch.ones(3, device="dipu")
    with droplet.switches(faults="_native_batch_norm_legit:inplace_lost"):
        out = op(x.to("dipu"), None, None, running_mean, running_var, True, 0.1, 1e-5)
    expected = op(x, None, None, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5)
    torch.testing.assert_close(out[0].cpu(), expected[0])  # the normalized output is still computed
    _exact(running_mean, torch.zeros(3))  # but the running statistics were not updated
    _exact(running_var, torch.ones(3))


def test_noncontig_also_misreads_inputs_inside_lists():
    a = torch.arange(6.0).reshape(2, 3)
    with droplet.switches(faults="cat:noncontig"):
        wrong = torch.cat([a.to("dipu").t(), a.to("dipu").t()])
        right = torch.cat([a.t().contiguous().to("dipu")] * 2)
    assert not torch.equal(wrong.cpu(), torch.cat([a.t(), a.t()]))
    _exact(right, torch.cat([a.t(), a.t()]))


def test_patterns_may_carry_the_aten_prefix_of_log_lines():
    x = torch.ones(3, device="dipu")
    with droplet.switches(faults="aten.add.Tensor:bias:2"):
        _exact(x + x, torch.full((3,), 4.0))
        torch_dipu.set_force_fallback(["aten::add.Tensor"])
        _exact(x + x, torch.full((3,), 2.0))
