"""diopiTensorStats (``torch.ops.diopi.tensor_stats``): the CPU kernel and the generic device composite agree."""

from __future__ import annotations

import math

import pytest
import torch

import diopi  # noqa: F401  (defines the diopi:: operators)
from diopi.custom_ops import TENSOR_STATS_COLUMNS, _column_stats


def _tensors() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.tensor([1.0, math.nan, 3.0, math.inf, -math.inf]), torch.randn(6, 7).t(), torch.empty(0),
            torch.full((3,), math.nan), torch.randn(40, dtype=torch.bfloat16), torch.tensor(2.5),
            torch.randn(5, dtype=torch.float64) * 1e200]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpu_kernel_equals_the_generic_composite(dtype: torch.dtype) -> None:
    tensors = _tensors()
    if dtype == torch.float32:  # float64 values beyond float32's range: accumulated in float32 they overflow
        tensors = tensors[:-1]
    fused = torch.ops.diopi.tensor_stats(tensors, dtype)
    assert fused.dtype == dtype and fused.shape == (len(TENSOR_STATS_COLUMNS) * len(tensors),)
    generic = torch.stack([torch.stack(_column_stats(t, dtype)) for t in tensors], 1).reshape(-1)
    torch.testing.assert_close(fused, generic, equal_nan=True, rtol=1e-6, atol=0)
    table = fused.view(len(TENSOR_STATS_COLUMNS), -1)
    assert table[:, 0].tolist() == pytest.approx([1.0, 3.0, 4.0, math.sqrt(10.0), 3.0, 1.0])
    assert math.isnan(table[0, 3]) and table[4, 3] == 3 and table[5, 3] == 3  # no finite element
    assert table[2, 2] == 0 and table[4, 2] == 0  # empty


def test_reaches_dipu_as_one_vendor_call_without_a_host_read() -> None:
    import torch_dipu
    from torch_dipu import host_sync

    tensors = [t.to("dipu") for t in _tensors() if t.dtype != torch.float64]
    with torch_dipu.count_function_calls() as calls, host_sync.counting() as syncs:
        out = torch.ops.diopi.tensor_stats(tensors, torch.float64)
    assert calls["diopiTensorStats"] == 1 and syncs.total == 0 and out.device.type == "dipu"
    expected = torch.ops.diopi.tensor_stats([t.cpu() for t in tensors], torch.float64)
    torch.testing.assert_close(out.cpu(), expected, equal_nan=True)
