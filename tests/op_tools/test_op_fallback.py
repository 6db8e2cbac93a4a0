"""OpFallback: calls on the device run on the CPU, results and gradients come back, in-place writes land."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import OpFallback
from torch_dipu.vendors import droplet

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_common import w1_step  # noqa: E402


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def _linear_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=g), torch.randn(3, 8, generator=g)


def test_a_faulty_op_is_right_under_fallback_forward_and_backward(tmp_path: Path) -> None:
    x, w = _linear_inputs()
    wc = w.clone().requires_grad_()
    F.linear(x, wc).sum().backward()
    xd, wd = x.to("dipu"), w.to("dipu").requires_grad_()
    with droplet.switches(faults="linear|mm:bias:0.5"):
        _exact(F.linear(xd, wd), F.linear(x, w) + 0.5)  # the fault is there
        with OpFallback(ops="torch.nn.functional.linear", results_dir=tmp_path, run_id="r") as fb:
            y = F.linear(xd, wd)
            z = xd @ wd.t()  # not in the list: still on the device, still wrong
        assert y.device.type == "dipu" and y.requires_grad and y.dtype == torch.float32
        _exact(y, F.linear(x, w))
        _exact(z.detach(), F.linear(x, w) + 0.5)
        y.sum().backward()
    assert wd.grad.device.type == "dipu"
    _exact(wd.grad, wc.grad)
    (row,) = fb.results
    assert row["name"] == "torch.nn.functional.linear" and row["verdict"] == "PASS"
    assert row["message"] == "ran on cpu" and row["phase"] == "forward" and row["dtype"] == "float32"
    assert fb.table.run_dir == tmp_path / "op_fallback" / "r" / "rank0"


def test_the_list_comes_from_the_environment_and_a_line_is_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OP_FALLBACK_LIST", r"torch\.matmul")
    x, w = _linear_inputs()
    with droplet.switches(faults="mm:bias:0.5"), OpFallback(results_dir=tmp_path) as fb:
        right = torch.matmul(x.to("dipu"), w.t().to("dipu"))
        wrong = torch.mm(x.to("dipu"), w.t().to("dipu"))
    _exact(right, x @ w.t())
    _exact(wrong, x @ w.t() + 0.5)
    assert fb.fallen_back == 1 and [r["name"] for r in fb.results] == ["torch.matmul"]
    assert "OpFallback: 1 calls ran on the CPU" in capsys.readouterr().err


def test_inplace_ops_write_into_the_device_tensors(tmp_path: Path) -> None:
    with droplet.switches(faults="add_.Tensor:inplace_lost,_foreach_add_.Scalar:inplace_lost"):
        a = torch.ones(3, device="dipu")
        a.add_(torch.ones(3, device="dipu"))
        _exact(a, torch.ones(3))  # the device drops the write
        with OpFallback(results_dir=tmp_path):
            b = torch.ones(3, device="dipu")
            assert b.add_(torch.ones(3, device="dipu")) is b
            _exact(b, torch.full((3,), 2.0))
            params = [torch.nn.Parameter(torch.zeros(2, device="dipu")) for _ in range(2)]
            with torch.no_grad():
                torch._foreach_add_(params, 1.5)
                assert params[0].copy_(torch.full((2,), 7.0, device="dipu")) is params[0]
            _exact(params[0].detach(), torch.full((2,), 7.0))
            _exact(params[1].detach(), torch.full((2,), 1.5))
            c = torch.zeros(4, device="dipu")
            c[1:3] = torch.ones(2, device="dipu")
            out = torch.empty(4, device="dipu")
            assert torch.add(c, 1, out=out) is out
            m = torch.ones(2, 3, device="dipu")
            m.t_()  # an in-place reshape: runs on the device
            assert m.shape == (3, 2)
    _exact(c, torch.tensor([0.0, 1.0, 1.0, 0.0]))
    _exact(out, torch.tensor([1.0, 2.0, 2.0, 1.0]))


def test_gradients_flow_through_inplace_ops_and_views_stay_views(tmp_path: Path) -> None:
    x = torch.arange(4.0, device="dipu").requires_grad_()
    with OpFallback(results_dir=tmp_path):
        y = x * 1.0
        y.mul_(3)
        base = torch.zeros(2, 4, device="dipu")
        row = base[1]
        row.add_(5)
        halves = torch.arange(6.0, device="dipu").split(3)
        cols = torch.arange(6.0, device="dipu").reshape(2, 3).t()
        assert cols.contiguous() is not cols and not cols.is_contiguous()
    y.sum().backward()
    _exact(x.grad, torch.full((4,), 3.0))
    _exact(base, torch.tensor([[0.0] * 4, [5.0] * 4]))
    assert row._base is base and halves[1]._base is not None


def test_outputs_of_every_kind(tmp_path: Path) -> None:
    x = torch.tensor([[1.0, 5.0, 2.0], [4.0, 3.0, 6.0]], device="dipu")
    with OpFallback(results_dir=tmp_path) as fb:
        m = torch.max(x, 1)
        assert type(m) is torch.return_types.max and m.values.device.type == "dipu"
        _exact(m.indices, torch.tensor([1, 2]))
        assert x.sum().item() == 21.0
        assert x.to(x.dtype) is x and x.contiguous() is x
        assert x.to("cpu").device.type == "cpu" and x.cpu().device.type == "cpu"
        z = torch.zeros_like(x, device="dipu")
        n = x.new_ones(2, dtype=torch.int64)
        assert z.device.type == "dipu" and n.device.type == "dipu" and n.dtype == torch.int64
        h = x.to(torch.float16)
        assert h.dtype == torch.float16 and h.device.type == "dipu"
        seen = fb.fallen_back
        made = torch.ones(2, device="dipu")  # a factory: nothing on the device before the call
        assert made.device.type == "dipu" and fb.fallen_back == seen


def test_random_calls_draw_from_the_device_generator(tmp_path: Path) -> None:
    ones = torch.ones(64, device="dipu")
    torch.dipu.manual_seed(3)
    plain = F.dropout(ones, 0.5)
    torch.dipu.manual_seed(3)
    cpu_state = torch.get_rng_state()
    with OpFallback(results_dir=tmp_path) as fb:
        first = F.dropout(ones, 0.5)
        second = F.dropout(ones, 0.5)
    assert fb.fallen_back == 2
    _exact(first, plain.cpu())
    assert not torch.equal(first.cpu(), second.cpu())
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU's stream is untouched


def test_batch_norm_running_statistics_reach_the_device(tmp_path: Path) -> None:
    bn = torch.nn.BatchNorm1d(3)
    bn_d = torch.nn.BatchNorm1d(3).to("dipu")
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    with OpFallback(results_dir=tmp_path):
        bn_d(x.to("dipu"))
    bn(x)
    _exact(bn_d.running_mean, bn.running_mean)
    _exact(bn_d.running_var, bn.running_var)


def _device_only(x: torch.Tensor) -> torch.Tensor:
    """A kernel without a CPU implementation, and none for half precision on the CPU."""
    if x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        raise NotImplementedError("no half kernel on the CPU")
    return x * 2 + (1 if x.device.type == "cpu" else 0)


def test_a_call_failing_on_the_cpu_runs_on_the_device_with_one_warning(tmp_path: Path) -> None:
    x = torch.ones(3, device="dipu", dtype=torch.bfloat16)
    handle = op_tools.apply_feature(_device_only, OpFallback(results_dir=tmp_path))
    (wrapped,) = handle.wrapped
    with pytest.warns(RuntimeWarning, match="OpFallback failed in running the call.*no half kernel"):
        y = wrapped(x)
    handle.remove()
    _exact(y, torch.full((3,), 2.0, dtype=torch.bfloat16))
    assert handle.tool.fallen_back == 0


@pytest.mark.parametrize("how", ["keyword", "environment"])
def test_retry_in_float32(tmp_path: Path, monkeypatch, how: str) -> None:
    if how == "environment":
        monkeypatch.setenv("OP_FALLBACK_RETRY_FLOAT32", "1")
    tool = OpFallback(results_dir=tmp_path, retry_float32=True if how == "keyword" else None)
    x = torch.ones(3, device="dipu", dtype=torch.bfloat16, requires_grad=True)
    handle = op_tools.apply_feature(_device_only, tool)
    y = handle.wrapped[0](x)
    handle.remove()
    assert y.dtype == torch.bfloat16 and y.device.type == "dipu"
    _exact(y.detach(), torch.full((3,), 3.0, dtype=torch.bfloat16))  # the CPU's result (+1)
    y.float().sum().backward()
    _exact(x.grad, torch.full((3,), 2.0, dtype=torch.bfloat16))
    assert tool.in_float32 == 1 and tool.results[0]["message"] == "ran on cpu in float32"


def test_training_moves_device_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cpu_model = torch.nn.Linear(4, 2)
    model = torch.nn.Linear(4, 2).to("dipu")
    model.load_state_dict(cpu_model.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1, foreach=True) for m in (cpu_model, model)]
    x = torch.randn(5, 4)
    before = model.weight.detach().cpu().clone()
    with OpFallback(results_dir=tmp_path):
        for _ in range(2):
            for m, opt, inp in ((cpu_model, opts[0], x), (model, opts[1], x.to("dipu"))):
                m(inp).square().mean().backward()
                opt.step()
                opt.zero_grad()
    assert not torch.equal(model.weight.detach().cpu(), before)
    _exact(model.weight.detach(), cpu_model.weight.detach())


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_w1_under_full_fallback_trains_as_on_the_cpu(tmp_path: Path) -> None:
    steps = 3
    cpu_step = w1_step("cpu")
    cpu = [cpu_step() for _ in range(steps)]
    with droplet.switches(faults="mm:bias:0.01"):
        plain_step = w1_step("dipu")
        plain = [plain_step() for _ in range(steps)]
        step = w1_step("dipu")
        with OpFallback(ops=".*", results_dir=tmp_path) as fb:
            fell = [step() for _ in range(steps)]
    assert plain != cpu  # the fault shows
    assert fell == cpu  # bitwise: every call ran on the CPU, with the CPU's kernels
    assert len(set(fell)) == steps  # the optimizer's in-place updates reached the device parameters
    names = {r["name"] for r in fb.results}
    assert {"torch.nn.functional.linear", "torch.nn.functional.scaled_dot_product_attention",
            "torch._foreach_addcdiv_", "torch.nn.functional.cross_entropy"} <= names
