"""diopiHistc's reference takes integer tensors as CUDA does (the CPU build has no integer histc).

Regression: transformers' grouped-mm MoE experts count tokens per expert with ``torch.histc`` of int32 expert
ids on every device but the CPU, so Qwen3-MoE and DeepSeek-V3 failed on dipu with '"histogram_cpu" not
implemented for 'Int''.
"""

from __future__ import annotations

import pytest
import torch

import torch_dipu  # noqa: F401  (the dipu device)
from diopi import host_kernels
from diopi.registry import get_function

HISTC = torch.ops.aten.histc.default


def as_cuda_counts(values: list[int], bins: int, low: int, high: int) -> list[int]:
    """CUDA's integer histc, element by element: ``(v - min) * bins // (max - min)``, last edge in the last bin."""
    counts = [0] * bins
    for v in values:
        if low <= v <= high:
            counts[min((v - low) * bins // (high - low), bins - 1)] += 1
    return counts


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
@pytest.mark.parametrize("bins, low, high", [(8, 0, 7), (3, 0, 7), (5, 2, 6), (4, -1, 9)])
def test_integer_histc_counts_like_cuda(dtype, bins, low, high):
    values = [0, 1, 1, 3, 7, 7, 7, 2, 5, 6, 4, 9, 8]
    out = host_kernels.histc(HISTC, torch.tensor(values, dtype=dtype), bins, low, high)
    assert out.dtype == dtype
    assert out.tolist() == as_cuda_counts(values, bins, low, high)


def test_integer_histc_takes_the_data_range_when_min_equals_max():
    x = torch.tensor([[3, 5], [5, 9]], dtype=torch.int32)
    assert host_kernels.histc(HISTC, x, 3, 0, 0).tolist() == as_cuda_counts([3, 5, 5, 9], 3, 3, 9)
    # a single value: the range is widened by one on each side
    assert host_kernels.histc(HISTC, torch.tensor([4, 4]), 2, 0, 0).tolist() == as_cuda_counts([4, 4], 2, 3, 5)
    assert host_kernels.histc(HISTC, torch.zeros(0, dtype=torch.int64), 4, 0, 0).tolist() == [0, 0, 0, 0]


def test_integer_histc_rejects_what_torch_rejects():
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        host_kernels.histc(HISTC, torch.tensor([1, 2]), 0, 0, 3)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        host_kernels.histc(HISTC, torch.tensor([1, 2]), 3, 4, 1)


def test_floating_histc_is_the_cpu_kernel():
    x = torch.randn(50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(host_kernels.histc(HISTC, x, 10, -2, 2), torch.histc(x, 10, -2, 2))
    assert get_function("diopiHistc").reference is host_kernels.histc


def test_integer_histc_on_dipu_as_transformers_calls_it():
    """grouped_mm_experts_forward: ``torch.histc(expert_ids.int(), bins=num_experts, min=0, max=num_experts - 1)``."""
    ids = torch.tensor([3, 0, 1, 1, 7, 3, 3, 5], dtype=torch.int32)
    counts = torch.histc(ids.to("dipu"), bins=8, min=0, max=7)
    assert counts.device.type == "dipu" and counts.dtype == torch.int32
    assert counts.cpu().tolist() == torch.bincount(ids, minlength=8).tolist()
