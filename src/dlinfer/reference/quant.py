"""Reference quantized kernels: per-token symmetric int8 activations (W8A8) and int4/int8 weight-only matmul
(W4A16)."""

from __future__ import annotations

import torch
from torch import Tensor

from dlinfer.registry import reference

from .linear import all_reduce_sum
from .norm import add_rms_norm, rms_norm

__all__ = ["add_rms_norm_w8a8", "dequantize_weight", "dynamic_quant", "linear_w8a8", "rms_norm_w8a8",
           "weight_quant_matmul"]

_MIN_SCALE = 1e-8


def _check_int8(op: str, quant_dtype: torch.dtype | None) -> None:
    if quant_dtype not in (None, torch.int8):
        raise ValueError(f"{op}: quant_dtype={quant_dtype} is not supported (torch.int8)")


def _per_token(x: Tensor) -> tuple[Tensor, Tensor]:
    xf = x.to(torch.float32)
    scale = (xf.abs().amax(-1, keepdim=True) / 127).clamp_min(_MIN_SCALE)
    return torch.round(xf / scale).clamp(-127, 127).to(torch.int8), scale


@reference("dynamic_quant")
def dynamic_quant(x: Tensor, quant_dtype: torch.dtype | None, quant_granularity: str) -> tuple[Tensor, Tensor]:
    """Per-token symmetric int8: ``scale = amax / 127`` ``(..., 1)`` float32, ``q = round(x / scale)``."""
    _check_int8("dynamic_quant", quant_dtype)
    if quant_granularity != "PER_TOKEN":
        raise ValueError(f"dynamic_quant: quant_granularity={quant_granularity!r} is not supported (PER_TOKEN)")
    return _per_token(x)


@reference("linear_w8a8")
def linear_w8a8(a: Tensor, b: Tensor, rms_scale: Tensor, linear_scale: Tensor, out_dtype: torch.dtype,
                quant_dtype: torch.dtype | None, bias: Tensor | None) -> Tensor:
    """``(a @ b.T)`` accumulated in int32, times ``rms_scale`` (per token) and ``linear_scale`` (per output
    channel), plus ``bias``, in ``out_dtype``."""
    op = "linear_w8a8"
    _check_int8(op, quant_dtype)
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise ValueError(f"{op}: a and b must be int8, got {a.dtype} and {b.dtype}")
    if b.dim() != 2 or b.shape[1] != a.shape[-1]:
        raise ValueError(f"{op}: b {tuple(b.shape)} must be (out, {a.shape[-1]})")
    if linear_scale.numel() != b.shape[0]:
        raise ValueError(f"{op}: linear_scale {tuple(linear_scale.shape)} must hold one scale per output channel "
                         f"({b.shape[0]})")
    if rms_scale.shape != (*a.shape[:-1], 1):
        raise ValueError(f"{op}: rms_scale {tuple(rms_scale.shape)} must be {(*a.shape[:-1], 1)}")
    acc = torch.matmul(a.to(torch.int32), b.to(torch.int32).t())
    out = acc.to(torch.float32) * rms_scale.to(torch.float32) * linear_scale.reshape(-1).to(torch.float32)
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out.to(out_dtype)


@reference("rms_norm_w8a8")
def rms_norm_w8a8(hidden_states: Tensor, weight: Tensor, epsilon: float,
                  quant_dtype: torch.dtype | None) -> tuple[Tensor, Tensor]:
    """``dynamic_quant(rms_norm(hidden_states))``."""
    _check_int8("rms_norm_w8a8", quant_dtype)
    return _per_token(rms_norm(hidden_states, weight, epsilon))


@reference("add_rms_norm_w8a8")
def add_rms_norm_w8a8(hidden_states: Tensor, residual: Tensor, weight: Tensor, epsilon: float,
                      quant_dtype: torch.dtype | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(q, scale, added)`` with ``q, scale = dynamic_quant(rms_norm(added))``."""
    _check_int8("add_rms_norm_w8a8", quant_dtype)
    normed, added = add_rms_norm(hidden_states, residual, weight, epsilon)
    q, scale = _per_token(normed)
    return q, scale, added


def dequantize_weight(qweight: Tensor, scale: Tensor, offset: Tensor | None, group_size: int,
                      dtype: torch.dtype) -> Tensor:
    """``(in, out)`` weights ``(q - offset) * scale`` from int4 packed uint8 ``(in, out // 2)`` (low nibble = even
    column) or int8 ``(in, out)``; ``scale``/``offset`` ``(out,)`` or ``(in // group_size, out)``."""
    op = "weight_quant_matmul"
    if qweight.dim() != 2:
        raise ValueError(f"{op}: qweight must be (in, out), got {tuple(qweight.shape)}")
    if qweight.dtype == torch.uint8:
        q = torch.stack((qweight & 0x0F, qweight >> 4), dim=-1).reshape(qweight.shape[0], -1).to(torch.float32)
        default_offset = 8.0
    elif qweight.dtype == torch.int8:
        q = qweight.to(torch.float32)
        default_offset = 0.0
    else:
        raise ValueError(f"{op}: qweight must be uint8 (packed int4) or int8, got {qweight.dtype}")
    n_in, n_out = q.shape
    if group_size:
        if n_in % group_size:
            raise ValueError(f"{op}: group_size={group_size} does not divide the input dimension {n_in}")
        want: tuple[int, ...] = (n_in // group_size, n_out)
    else:
        want = (n_out,)
    if tuple(scale.shape) not in (want, (1, n_out) if not group_size else want):
        raise ValueError(f"{op}: scale {tuple(scale.shape)} must be {want} (group_size={group_size})")
    if offset is not None and offset.numel() != scale.numel():
        raise ValueError(f"{op}: offset {tuple(offset.shape)} must match scale {tuple(scale.shape)}")
    s = scale.to(torch.float32).reshape(-1, n_out)
    z = torch.full_like(s, default_offset) if offset is None else offset.to(torch.float32).reshape(-1, n_out)
    if group_size:
        s = s.repeat_interleave(group_size, dim=0)
        z = z.repeat_interleave(group_size, dim=0)
    return ((q - z) * s).to(dtype)


@reference("weight_quant_matmul")
def weight_quant_matmul(x: Tensor, qweight: Tensor, scale: Tensor, offset: Tensor | None, bias: Tensor | None,
                        all_reduce: bool, group_size: int) -> Tensor:
    """``x @ dequant(qweight) + bias`` (weights dequantized into ``x``'s dtype)."""
    w = dequantize_weight(qweight, scale, offset, group_size, x.dtype)
    if w.shape[0] != x.shape[-1]:
        raise ValueError(f"weight_quant_matmul: qweight has {w.shape[0]} input rows, x has {x.shape[-1]} features")
    out = torch.matmul(x, w)
    if bias is not None:
        out = out + bias.to(out.dtype)
    return all_reduce_sum(out, "weight_quant_matmul") if all_reduce else out
