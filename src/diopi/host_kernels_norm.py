"""Reference kernels for normalization operators PyTorch ships for CUDA only: synchronized batch norm and the
RMS norm backward kernel.

``torch.nn.SyncBatchNorm`` splits batch norm into per-device statistics (``batch_norm_stats``), a gather of
every rank's statistics (``batch_norm_gather_stats_with_counts``), the elementwise normalization
(``batch_norm_elemt``) and, in backward, a per-device reduction (``batch_norm_backward_reduce``) followed by the
elementwise gradient (``batch_norm_backward_elemt``). The kernels below follow those definitions on host tensors
(channels are dimension 1), called like any DIOPI implementation: ``kernel(op, *args, **kwargs)``. Statistics
are float32 for half-precision inputs, as on CUDA.
"""

from __future__ import annotations

from typing import Any

import torch

from diopi.custom_ops import _stat_dtype


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` as ``[rows, C]`` in its statistics dtype (channels are dimension 1)."""
    return t.movedim(1, -1).reshape(-1, t.shape[1]).to(_stat_dtype(t))


def _per_channel(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A ``[C]`` vector shaped to broadcast over ``like`` along dimension 1."""
    return v.reshape((1, -1) + (1,) * (like.dim() - 2))


def batch_norm_stats(op: Any, input: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and inverse standard deviation ``1 / sqrt(var + eps)`` (biased variance)."""
    rows = _channels_last(input)
    var, mean = torch.var_mean(rows, 0, correction=0)
    return mean, torch.rsqrt(var + eps)


def batch_norm_elemt(op: Any, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     mean: torch.Tensor, invstd: torch.Tensor, eps: float) -> torch.Tensor:
    """``(x - mean) * invstd * weight + bias`` per channel, in the input dtype."""
    x = input.to(_stat_dtype(input))
    out = (x - _per_channel(mean, x)) * _per_channel(invstd, x)
    if weight is not None:
        out = out * _per_channel(weight.to(out.dtype), x)
    if bias is not None:
        out = out + _per_channel(bias.to(out.dtype), x)
    return out.to(input.dtype)


def batch_norm_gather_stats_with_counts(op: Any, input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
                                        running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                                        momentum: float, eps: float, counts: torch.Tensor
                                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine the ranks' statistics (``mean``/``invstd`` ``[world, C]``, ``counts`` ``[world]``) into the global
    mean and inverse standard deviation; update the running statistics in place (unbiased variance)."""
    n = counts.to(mean.dtype).unsqueeze(1)
    total = n.sum()
    global_mean = (n * mean).sum(0) / total
    var_each = 1 / (invstd * invstd) - eps
    global_var = (n * (var_each + (mean - global_mean) ** 2)).sum(0) / total
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
    if running_var is not None:
        unbiased = global_var * total / (total - 1)
        running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return global_mean, torch.rsqrt(global_var + eps)


def batch_norm_backward_reduce(op: Any, grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                               invstd: torch.Tensor, weight: torch.Tensor | None, input_g: bool, weight_g: bool,
                               bias_g: bool) -> tuple[torch.Tensor | None, ...]:
    """Per-channel ``sum(dy)`` and ``sum(dy * (x - mean))`` (when the input needs a gradient), the weight's
    gradient ``sum(dy * (x - mean)) * invstd`` and the bias's ``sum(dy)``; None for what is not asked."""
    dy = _channels_last(grad_out)
    xmu = _channels_last(input) - mean
    sum_dy = dy.sum(0)
    sum_dy_xmu = (dy * xmu).sum(0)
    grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) if weight_g and weight is not None else None
    grad_bias = sum_dy.to(weight.dtype if weight is not None else sum_dy.dtype) if bias_g else None
    if not input_g:
        return None, None, grad_weight, grad_bias
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def batch_norm_backward_elemt(op: Any, grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                              invstd: torch.Tensor, weight: torch.Tensor | None, sum_dy: torch.Tensor,
                              sum_dy_xmu: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """The input's gradient from the globally reduced sums (``count``: every rank's element count per channel):
    ``(dy - sum_dy / N - (x - mean) * invstd^2 * sum_dy_xmu / N) * invstd * weight``."""
    total = count.to(sum_dy.dtype).sum()
    dy = grad_out.to(_stat_dtype(grad_out))
    x = input.to(dy.dtype)
    scale = _per_channel(invstd, x) if weight is None else _per_channel(invstd * weight.to(invstd.dtype), x)
    grad = dy - _per_channel(sum_dy / total, x) - (x - _per_channel(mean, x)) * _per_channel(
        invstd * invstd * sum_dy_xmu / total, x)
    return (grad * scale).to(grad_out.dtype)


def fused_rms_norm_backward(op: Any, grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: list[int],
                            rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: list[bool]
                            ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``_fused_rms_norm_backward`` (no CPU kernel in PyTorch): with ``xhat = x * rstd`` over the trailing
    ``normalized_shape`` dimensions and ``gx = dy * weight``, ``grad_input = rstd * (gx - xhat * mean(gx * xhat))``
    and ``grad_weight = sum(dy * xhat)`` over the leading dimensions; None where ``output_mask`` says so."""
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    x, dy = input.to(_stat_dtype(input)), grad_out.to(_stat_dtype(input))
    xhat = x * rstd.to(x.dtype)
    gx = dy if weight is None else dy * weight.to(x.dtype)
    grad_input = rstd * (gx - xhat * (gx * xhat).mean(dims, keepdim=True)) if output_mask[0] else None
    grad_weight = None
    if output_mask[1] and weight is not None:
        lead = tuple(range(input.dim() - len(normalized_shape)))
        grad_weight = (dy * xhat).sum(lead).to(weight.dtype) if lead else (dy * xhat).to(weight.dtype)
    return (None if grad_input is None else grad_input.to(input.dtype)), grad_weight


#: DIOPI function name -> reference kernel, for :mod:`diopi.functions.norm`.
REFERENCES = {
    "diopiRMSNormBackward": fused_rms_norm_backward,
    "diopiBatchNormStats": batch_norm_stats,
    "diopiBatchNormElemt": batch_norm_elemt,
    "diopiBatchNormGatherStatsWithCounts": batch_norm_gather_stats_with_counts,
    "diopiBatchNormBackwardReduce": batch_norm_backward_reduce,
    "diopiBatchNormBackwardElemt": batch_norm_backward_elemt,
}
