"""OpDtypeCast: half-precision calls on the device compute in float32, results come back in their dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import OpDtypeCast
from op_tools.dtype_cast import parse_cast


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.detach().cpu(), want, rtol=0, atol=0)


def test_bf16_linear_computes_in_float32_and_gradients_reach_bf16_leaves(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=g).bfloat16(), torch.randn(3, 8, generator=g).bfloat16()
    xd, wd = x.to("dipu").requires_grad_(), w.to("dipu").requires_grad_()
    with OpDtypeCast(results_dir=tmp_path, run_id="r") as tool:
        y = F.linear(xd, wd)
        loss = (y * y).sum()
    assert y.dtype == torch.bfloat16 and y.device.type == "dipu" and y.requires_grad
    _exact(y, F.linear(x.float(), w.float()).bfloat16())
    loss.backward()
    assert wd.grad.dtype == torch.bfloat16 and xd.grad.dtype == torch.bfloat16
    xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
    yf = F.linear(xf, wf).bfloat16().float()
    (yf * yf).bfloat16().float().sum().backward()
    torch.testing.assert_close(wd.grad.cpu().float(), wf.grad, rtol=2e-2, atol=2e-2)
    names = [r["name"] for r in tool.results]
    assert names == ["torch.nn.functional.linear", "torch.Tensor.mul", "torch.Tensor.sum"]
    assert tool.results[0]["message"] == "ran in bfloat16->float32" and tool.results[0]["dtype"] == "bfloat16"
    assert tool.table.run_dir == tmp_path / "op_dtype_cast" / "r" / "rank0"


def _kernel(seen: list[torch.dtype]):
    def kernel(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.dtype)
        return x * 3
    return kernel


def test_the_kernel_sees_the_wide_dtype(tmp_path: Path) -> None:
    seen: list[torch.dtype] = []
    handle = op_tools.apply_feature(_kernel(seen), OpDtypeCast(results_dir=tmp_path))
    out = handle.wrapped[0](torch.full((2,), 1.5, device="dipu", dtype=torch.float16))
    out32 = handle.wrapped[0](torch.full((2,), 1.5, device="dipu"))
    handle.remove()
    assert seen == [torch.float32, torch.float32]
    assert out.dtype == torch.float16 and out32.dtype == torch.float32
    _exact(out, torch.full((2,), 4.5, dtype=torch.float16))
    assert handle.tool.casts == 1


def test_inplace_views_and_calls_that_choose_their_dtype(tmp_path: Path) -> None:
    a = torch.full((4,), 1.0, device="dipu", dtype=torch.bfloat16)
    b = torch.full((4,), 1.0 / 3, dtype=torch.bfloat16)
    with OpDtypeCast(results_dir=tmp_path) as tool:
        assert a.add_(b.to("dipu")) is a
        row = a[1:3]
        row.mul_(2)
        assert row._base is a
        assert a.float().dtype == torch.float32 and a.to(torch.float32).dtype == torch.float32
        mixed = a * torch.ones(4, device="dipu")
        assert mixed.dtype == torch.float32
        count = tool.casts
        torch.ones(2, device="dipu") + 1  # float32 only: left alone
        assert tool.casts == count
    want = (torch.ones(4) + b.float()).bfloat16()
    want[1:3] = (want[1:3].float() * 2).bfloat16()
    _exact(a, want)


def test_the_cast_table_from_keyword_and_environment(tmp_path: Path, monkeypatch) -> None:
    assert parse_cast("torch.float16->torch.float32, bfloat16->float64") == {
        torch.float16: torch.float32, torch.bfloat16: torch.float64}
    assert OpDtypeCast(cast={torch.float16: torch.float64}).cast == {torch.float16: torch.float64}
    monkeypatch.setenv("OP_DTYPE_CAST_DICT", "torch.bfloat16->torch.float64")
    tool = OpDtypeCast(results_dir=tmp_path)
    assert tool.cast == {torch.bfloat16: torch.float64}
    with tool:
        y = torch.ones(2, device="dipu", dtype=torch.bfloat16) / 3
        h = torch.ones(2, device="dipu", dtype=torch.float16) / 3
    assert y.dtype == torch.bfloat16 and tool.casts == 1 and h.dtype == torch.float16
    _exact(y, (torch.ones(2, dtype=torch.float64) / 3).bfloat16())
    for bad in ("float16=>float32", "torch.float16->torch.int32", "nonsense->float32"):
        monkeypatch.setenv("OP_DTYPE_CAST_DICT", bad)
        with pytest.raises(ValueError, match="OP_DTYPE_CAST_DICT"):
            OpDtypeCast()
    with pytest.raises(ValueError, match="OP_DTYPE_CAST_DICT"):
        OpDtypeCast(cast="float16")


def test_a_bf16_model_trains_under_the_cast(tmp_path: Path, capsys) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4)).to("dipu", torch.bfloat16)
    reference = [p.detach().float().cpu() for p in model.parameters()]
    x = torch.randn(6, 8).to("dipu", torch.bfloat16)
    labels = torch.tensor([0, 1, 2, 3, 0, 1], device="dipu")
    with OpDtypeCast(results_dir=tmp_path) as tool:
        logits = model(x)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.bfloat16
    assert all(p.grad is not None and p.grad.dtype == torch.bfloat16 for p in model.parameters())
    # The same model in float32, each op's result rounded to bfloat16 like the cast does.
    h = F.linear(x.cpu().float(), reference[0], reference[1]).bfloat16().float()
    h = F.gelu(h).bfloat16().float()
    h = F.layer_norm(h, (16,), reference[2], reference[3]).bfloat16().float()
    want = F.linear(h, reference[4], reference[5]).bfloat16()
    _exact(logits, want)
    assert {"torch.nn.functional.linear", "torch.nn.functional.layer_norm",
            "torch.nn.functional.cross_entropy"} <= {r["name"] for r in tool.results}
    assert f"OpDtypeCast: {tool.casts} calls ran with cast dtypes" in capsys.readouterr().err


def test_half_batch_norm_running_statistics_reach_the_module(tmp_path: Path) -> None:
    """batch_norm writes its running statistics without bumping their version: the cast copies' new values
    must still be written back (as on the CPU), or the model trains with stale statistics and no error."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 4, generator=g) * 3 + 2).half()
    reference = torch.nn.BatchNorm1d(4).half()
    reference(x.float().half())  # CPU half: what the statistics must be (up to the float32 compute)
    bn = torch.nn.BatchNorm1d(4).half().to("dipu")
    with OpDtypeCast(results_dir=tmp_path):
        bn(x.to("dipu"))
    assert bn.running_mean.dtype == torch.float16 and bn.num_batches_tracked.item() == 1
    torch.testing.assert_close(bn.running_mean.cpu(), reference.running_mean, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(bn.running_var.cpu(), reference.running_var, rtol=1e-2, atol=1e-2)
    assert bn.running_mean.abs().sum().item() > 0.5  # moved from its initial zeros
