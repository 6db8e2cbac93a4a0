"""DIOPI functions that have no ATen operator, defined as ``diopi::`` custom operators.

Vision (``roi_align``, ``nms``) and the fused LLM functions (``rms_norm``, ``add_rms_norm``,
``rotary_embedding``, ``silu_and_mul``, ``flash_attention_varlen``, ``paged_attention_decode``,
``reshape_and_cache``, ``moe_gating_topk_softmax``) are operators of the ``diopi`` namespace, so a model calls
``torch.ops.diopi.<name>`` and any device (dipu through its Python key) receives them as themselves. Each
operator's CPU kernel below is its reference, written from the function's definition; training operators get
autograd that calls their backward operator, so the backward DIOPI function is reached too.

Half-precision inputs are computed in float32 (the accumulation type) and the results cast back.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.library import custom_op, register_autograd, register_fake


def _acc(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its accumulation dtype: float32 for float16/bfloat16, itself otherwise."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _stat_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


# ---------------------------------------------------------------------------------------------- rms norm
@custom_op("diopi::rms_norm", mutates_args=(),
           schema="(Tensor input, Tensor weight, float eps) -> (Tensor out, Tensor rstd)")
def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RMS norm over the last dimension: ``out = x / sqrt(mean(x^2) + eps) * weight``; ``rstd`` (the inverse
    root mean square, shape ``input.shape[:-1]``) is saved for the backward function."""
    return _rms(input, weight, eps)


def _rms(input: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = _acc(input)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    out = (x * rstd * _acc(weight)).to(input.dtype)
    return out, rstd.squeeze(-1).to(_stat_dtype(input))


@custom_op("diopi::rms_norm_backward", mutates_args=(),
           schema="(Tensor grad_out, Tensor input, Tensor weight, Tensor rstd) -> (Tensor grad_input, "
                  "Tensor grad_weight)")
def rms_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                      rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of :func:`rms_norm`: with ``xhat = x * rstd`` and ``gx = grad * weight``,
    ``grad_input = rstd * (gx - xhat * mean(gx * xhat))``, ``grad_weight = sum(grad * xhat)`` over rows."""
    x, g, r = _acc(input), _acc(grad_out), _acc(rstd).unsqueeze(-1)
    xhat = x * r
    gx = g * _acc(weight)
    grad_input = r * (gx - xhat * (gx * xhat).mean(-1, keepdim=True))
    grad_weight = (g * xhat).reshape(-1, x.shape[-1]).sum(0)
    return grad_input.to(input.dtype), grad_weight.to(weight.dtype)


def _rms_norm_setup(ctx, inputs, output) -> None:
    input, weight, _ = inputs
    ctx.save_for_backward(input, weight, output[1])


def _rms_norm_grad(ctx, grad_out, grad_rstd):
    input, weight, rstd = ctx.saved_tensors
    grad_input, grad_weight = torch.ops.diopi.rms_norm_backward(grad_out, input, weight, rstd)
    return grad_input, grad_weight, None


register_autograd("diopi::rms_norm", _rms_norm_grad, setup_context=_rms_norm_setup)


@custom_op("diopi::add_rms_norm", mutates_args=(),
           schema="(Tensor input, Tensor residual, Tensor weight, float eps) -> (Tensor out, Tensor residual_out, "
                  "Tensor rstd)")
def add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The residual add before a decoder layer's norm, fused: ``residual_out = input + residual``,
    ``out, rstd = rms_norm(residual_out, weight, eps)`` (inference)."""
    residual_out = (_acc(input) + _acc(residual)).to(input.dtype)
    out, rstd = _rms(residual_out, weight, eps)
    return out, residual_out, rstd


# ---------------------------------------------------------------------------------------------- rotary embedding
def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the pairs of the last dimension of ``x`` by the angles whose cosines and sines are given; pairs are
    ``(2i, 2i+1)`` when ``interleaved`` (GPT-J), else ``(i, i + D/2)`` (GPT-NeoX / Llama)."""
    if x.shape[-1] % 2:
        raise ValueError(f"diopi::rotary_embedding: the last dimension must be even, got {tuple(x.shape)}")
    xa = _acc(x)
    c, s = _acc(cos), _acc(sin)
    x1, x2 = (xa[..., 0::2], xa[..., 1::2]) if interleaved else xa.chunk(2, -1)
    r1, r2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.stack((r1, r2), -1).flatten(-2) if interleaved else torch.cat((r1, r2), -1)
    return out.to(x.dtype)


@custom_op("diopi::rotary_embedding", mutates_args=(),
           schema="(Tensor input, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor")
def rotary_embedding(input: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
                     ) -> torch.Tensor:
    """Rotary position embedding of ``input`` (``[..., D]``); ``cos``/``sin`` broadcast to ``[..., D/2]``."""
    return _rotate(input, cos, sin, interleaved)


@custom_op("diopi::rotary_embedding_backward", mutates_args=(),
           schema="(Tensor grad_out, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor")
def rotary_embedding_backward(grad_out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                              interleaved: bool = False) -> torch.Tensor:
    """Gradient of :func:`rotary_embedding` for its input: the inverse rotation (angle negated)."""
    return _rotate(grad_out, cos, -sin, interleaved)


def _rotary_setup(ctx, inputs, output) -> None:
    _, cos, sin, interleaved = inputs
    ctx.save_for_backward(cos, sin)
    ctx.interleaved = interleaved


def _rotary_grad(ctx, grad_out):
    cos, sin = ctx.saved_tensors
    return torch.ops.diopi.rotary_embedding_backward(grad_out, cos, sin, ctx.interleaved), None, None, None


register_autograd("diopi::rotary_embedding", _rotary_grad, setup_context=_rotary_setup)


# ---------------------------------------------------------------------------------------------- silu and mul
@custom_op("diopi::silu_and_mul", mutates_args=(), schema="(Tensor input) -> Tensor")
def silu_and_mul(input: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate: ``silu(a) * b`` where ``a, b`` are the two halves of the last dimension of ``input``."""
    a, b = _acc(input).chunk(2, -1)
    return (torch.nn.functional.silu(a) * b).to(input.dtype)


@custom_op("diopi::silu_and_mul_backward", mutates_args=(), schema="(Tensor grad_out, Tensor input) -> Tensor")
def silu_and_mul_backward(grad_out: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """Gradient of :func:`silu_and_mul`: ``[g * b * s * (1 + a * (1 - s)), g * a * s]`` with ``s = sigmoid(a)``."""
    a, b = _acc(input).chunk(2, -1)
    g = _acc(grad_out)
    s = torch.sigmoid(a)
    return torch.cat((g * b * s * (1 + a * (1 - s)), g * a * s), -1).to(input.dtype)


def _silu_and_mul_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _silu_and_mul_grad(ctx, grad_out):
    (input,) = ctx.saved_tensors
    return torch.ops.diopi.silu_and_mul_backward(grad_out, input)


register_autograd("diopi::silu_and_mul", _silu_and_mul_grad, setup_context=_silu_and_mul_setup)


# ---------------------------------------------------------------------------------------------- attention
def _bounds(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    points = cu_seqlens.tolist()
    return list(zip(points[:-1], points[1:], strict=True))


def _check_heads(q: torch.Tensor, k: torch.Tensor, name: str) -> int:
    if q.shape[-2] % k.shape[-2]:
        raise ValueError(f"diopi::{name}: query heads ({q.shape[-2]}) must be a multiple of key/value heads "
                         f"({k.shape[-2]})")
    return q.shape[-2] // k.shape[-2]


def _probabilities(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool, lse: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention probabilities of one sequence, ``q`` ``[H, sq, D]`` against ``k`` ``[H, sk, D]``, and the rows'
    log-sum-exp; a causal mask is aligned to the bottom right (query i sees keys ``j <= i + sk - sq``). A row with
    no visible key has probabilities 0 and log-sum-exp -inf."""
    scores = q @ k.transpose(-1, -2) * scale
    sq, sk = q.shape[-2], k.shape[-2]
    if causal:
        visible = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        scores = scores.masked_fill(~visible, -math.inf)
    if lse is None:
        lse = torch.logsumexp(scores, -1)
    finite = torch.isfinite(lse).unsqueeze(-1)
    probs = torch.where(finite, torch.exp(scores - torch.where(finite, lse.unsqueeze(-1), 0)), 0)
    return probs, lse


@custom_op("diopi::flash_attention_varlen", mutates_args=(),
           schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
                  "int max_seqlen_k, float softmax_scale, bool causal=False) -> (Tensor out, Tensor softmax_lse)")
def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                           causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over packed variable-length sequences: ``q`` ``[total_q, Hq, D]``, ``k``/``v`` ``[total_k, Hkv,
    D]`` (grouped-query attention when ``Hkv < Hq``), sequence ``b`` spanning rows ``cu_seqlens[b]:cu_seqlens[b+1]``.
    Returns ``out`` ``[total_q, Hq, Dv]`` and ``softmax_lse`` ``[Hq, total_q]`` (float32 for half inputs)."""
    group = _check_heads(q, k, "flash_attention_varlen")
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])
    lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=_stat_dtype(q))
    for (q0, q1), (k0, k1) in zip(_bounds(cu_seqlens_q), _bounds(cu_seqlens_k), strict=True):
        qs = _acc(q[q0:q1]).transpose(0, 1)
        ks = _acc(k[k0:k1]).transpose(0, 1).repeat_interleave(group, 0)
        vs = _acc(v[k0:k1]).transpose(0, 1).repeat_interleave(group, 0)
        probs, row_lse = _probabilities(qs, ks, softmax_scale, causal)
        out[q0:q1] = (probs @ vs).transpose(0, 1).to(q.dtype)
        lse[:, q0:q1] = row_lse.to(lse.dtype)
    return out, lse


@custom_op("diopi::flash_attention_varlen_backward", mutates_args=(),
           schema="(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
                  "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float softmax_scale, "
                  "bool causal=False) -> (Tensor grad_q, Tensor grad_k, Tensor grad_v)")
def flash_attention_varlen_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                    out: torch.Tensor, softmax_lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    softmax_scale: float, causal: bool = False
                                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of :func:`flash_attention_varlen` from the saved log-sum-exp: ``dV = P^T dO``,
    ``dS = P * (dO V^T - rowsum(dO * O))``, ``dQ = scale dS K``, ``dK = scale dS^T Q`` (summed over a group's heads)."""
    group = _check_heads(q, k, "flash_attention_varlen_backward")
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    heads_kv = k.shape[1]
    for (q0, q1), (k0, k1) in zip(_bounds(cu_seqlens_q), _bounds(cu_seqlens_k), strict=True):
        qs = _acc(q[q0:q1]).transpose(0, 1)
        ks = _acc(k[k0:k1]).transpose(0, 1).repeat_interleave(group, 0)
        vs = _acc(v[k0:k1]).transpose(0, 1).repeat_interleave(group, 0)
        go = _acc(grad_out[q0:q1]).transpose(0, 1)
        os = _acc(out[q0:q1]).transpose(0, 1)
        probs, _ = _probabilities(qs, ks, softmax_scale, causal, _acc(softmax_lse[:, q0:q1]))
        dv = probs.transpose(-1, -2) @ go
        ds = probs * (go @ vs.transpose(-1, -2) - (go * os).sum(-1, keepdim=True))
        dq = ds @ ks * softmax_scale
        dk = ds.transpose(-1, -2) @ qs * softmax_scale
        grad_q[q0:q1] = dq.transpose(0, 1).to(q.dtype)
        grad_k[k0:k1] = dk.unflatten(0, (heads_kv, group)).sum(1).transpose(0, 1).to(k.dtype)
        grad_v[k0:k1] = dv.unflatten(0, (heads_kv, group)).sum(1).transpose(0, 1).to(v.dtype)
    return grad_q, grad_k, grad_v


def _varlen_setup(ctx, inputs, output) -> None:
    q, k, v, cu_q, cu_k, max_q, max_k, scale, causal = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], cu_q, cu_k)
    ctx.args = (max_q, max_k, scale, causal)


def _varlen_grad(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    grads = torch.ops.diopi.flash_attention_varlen_backward(grad_out, q, k, v, out, lse, cu_q, cu_k, *ctx.args)
    return (*grads, None, None, None, None, None, None)


register_autograd("diopi::flash_attention_varlen", _varlen_grad, setup_context=_varlen_setup)


@custom_op("diopi::paged_attention_decode", mutates_args=(),
           schema="(Tensor q, Tensor key_cache, Tensor value_cache, Tensor block_tables, Tensor context_lens, "
                  "float softmax_scale) -> Tensor")
def paged_attention_decode(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, softmax_scale: float
                           ) -> torch.Tensor:
    """One decoding step against a paged KV cache: ``q`` ``[B, Hq, D]``; ``key_cache``/``value_cache``
    ``[num_blocks, block_size, Hkv, D]``; sequence ``b`` has ``context_lens[b]`` tokens stored in the blocks
    ``block_tables[b, :]`` in order. Returns ``[B, Hq, Dv]`` (zeros for an empty context)."""
    group = _check_heads(q, key_cache, "paged_attention_decode")
    block_size = key_cache.shape[1]
    out = q.new_zeros(q.shape[0], q.shape[1], value_cache.shape[-1])
    lengths = context_lens.to(torch.int64)
    longest = int(lengths.max()) if lengths.numel() else 0
    if longest <= 0:
        return out
    # every sequence at once: its blocks gathered to a padded [B, longest] row, the positions past its length masked
    blocks = block_tables[:, : -(-longest // block_size)].long().clamp(0, key_cache.shape[0] - 1)
    keys = _acc(key_cache[blocks].flatten(1, 2)[:, :longest]).transpose(1, 2)       # [B, Hkv, longest, D]
    values = _acc(value_cache[blocks].flatten(1, 2)[:, :longest]).transpose(1, 2)
    visible = torch.arange(longest, device=lengths.device) < lengths.unsqueeze(1)   # [B, longest]
    attended = torch.nn.functional.scaled_dot_product_attention(
        _acc(q).unsqueeze(2), keys, values, attn_mask=visible[:, None, None, :], scale=softmax_scale,
        enable_gqa=group > 1).squeeze(2)
    # a sequence without context attends to nothing: zeros (the fused kernel would give NaN)
    return torch.where((lengths > 0)[:, None, None], attended, 0).to(q.dtype)


@custom_op("diopi::reshape_and_cache", mutates_args=("key_cache", "value_cache"),
           schema="(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping) -> ()")
def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> None:
    """Write new tokens' keys and values (``[T, Hkv, D]``) into the paged caches (``[num_blocks, block_size, Hkv,
    D]``) in place: token ``t`` goes to slot ``slot_mapping[t]`` = ``block * block_size + offset``; a negative slot
    (padding) is skipped."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    block_size = key_cache.shape[1]
    blocks, offsets = slots // block_size, slots % block_size
    key_cache[blocks, offsets] = key[keep].to(key_cache.dtype)
    value_cache[blocks, offsets] = value[keep].to(value_cache.dtype)


@custom_op("diopi::moe_gating_topk_softmax", mutates_args=(),
           schema="(Tensor gating_logits, int k, bool renormalize=False) -> (Tensor weights, Tensor indices)")
def moe_gating_topk_softmax(gating_logits: torch.Tensor, k: int, renormalize: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixture-of-experts routing: softmax over the experts (last dimension, in float32), the ``k`` largest
    probabilities and their expert indices (int64), renormalized to sum to 1 when asked."""
    probs = torch.softmax(gating_logits.to(torch.promote_types(gating_logits.dtype, torch.float32)), -1)
    weights, indices = probs.topk(k, -1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights, indices


# ---------------------------------------------------------------------------------------------- vision
def _axis_samples(coords: torch.Tensor, size: int) -> tuple[torch.Tensor, ...]:
    """Bilinear sampling along one axis as ROI Align defines it: ``(low, high, weight_low, weight_high, valid)``;
    a coordinate outside ``[-1, size]`` is invalid (contributes 0), one past the last pixel is clamped to it."""
    valid = (coords >= -1.0) & (coords <= size)
    c = coords.clamp(min=0)
    low = c.floor().long()
    at_end = low >= size - 1
    low = torch.where(at_end, size - 1, low)
    high = torch.where(at_end, size - 1, low + 1)
    c = torch.where(at_end, low.to(c.dtype), c)
    frac = c - low
    return low.clamp(min=0), high.clamp(min=0), 1 - frac, frac, valid


def _roi_grid(roi: list[float], spatial_scale: float, pooled_height: int, pooled_width: int, sampling_ratio: int,
              aligned: bool, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The sampling points of one ROI: y coordinates ``[ph * gh]``, x coordinates ``[pw * gw]`` and the grid."""
    offset = 0.5 if aligned else 0.0
    x1, y1, x2, y2 = (c * spatial_scale - offset for c in roi[1:])
    width, height = x2 - x1, y2 - y1
    if not aligned:
        width, height = max(width, 1.0), max(height, 1.0)
    bin_h, bin_w = height / pooled_height, width / pooled_width
    grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(height / pooled_height)
    grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(width / pooled_width)
    ys = y1 + (torch.arange(pooled_height, dtype=dtype)[:, None] * bin_h
               + (torch.arange(grid_h, dtype=dtype)[None, :] + 0.5) * bin_h / max(grid_h, 1))
    xs = x1 + (torch.arange(pooled_width, dtype=dtype)[:, None] * bin_w
               + (torch.arange(grid_w, dtype=dtype)[None, :] + 0.5) * bin_w / max(grid_w, 1))
    return ys.flatten(), xs.flatten(), grid_h, grid_w


def _corners(ys: torch.Tensor, xs: torch.Tensor, height: int, width: int, count: int):
    """The four bilinear corners of every sampling point: ``(y index, x index, weight [Ny, Nx])``, the weight
    including the 1/count of the bin average and 0 for invalid points."""
    y_low, y_high, wy_low, wy_high, y_valid = _axis_samples(ys, height)
    x_low, x_high, wx_low, wx_high, x_valid = _axis_samples(xs, width)
    valid = (y_valid[:, None] & x_valid[None, :]).to(ys.dtype) / count
    for yi, wy in ((y_low, wy_low), (y_high, wy_high)):
        for xi, wx in ((x_low, wx_low), (x_high, wx_high)):
            yield yi, xi, wy[:, None] * wx[None, :] * valid


@custom_op("diopi::roi_align", mutates_args=(),
           schema="(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
                  "int sampling_ratio, bool aligned) -> Tensor")
def roi_align(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
              pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """ROI Align (Mask R-CNN): ``input`` ``[N, C, H, W]``, ``rois`` ``[K, 5]`` rows ``(batch index, x1, y1, x2,
    y2)``; each output bin ``[K, C, ph, pw]`` is the average of bilinear samples on a regular grid
    (``sampling_ratio`` per side, or ``ceil(bin size)`` when 0); ``aligned`` shifts pixel centers by -0.5."""
    _, channels, height, width = input.shape
    out = input.new_zeros(rois.shape[0], channels, pooled_height, pooled_width)
    for r, roi in enumerate(rois.tolist()):
        ys, xs, grid_h, grid_w = _roi_grid(roi, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned,
                                           _acc(input).dtype)
        if grid_h * grid_w == 0:
            continue
        feature = _acc(input[int(roi[0])])
        samples = sum(feature[:, yi][:, :, xi] * w for yi, xi, w in _corners(ys, xs, height, width, grid_h * grid_w))
        bins = samples.unflatten(1, (pooled_height, grid_h)).unflatten(3, (pooled_width, grid_w))
        out[r] = bins.sum((2, 4)).to(input.dtype)
    return out


@custom_op("diopi::roi_align_backward", mutates_args=(),
           schema="(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
                  "int batch_size, int channels, int height, int width, int sampling_ratio, bool aligned) -> Tensor")
def roi_align_backward(grad: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
                       pooled_width: int, batch_size: int, channels: int, height: int, width: int,
                       sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """Gradient of :func:`roi_align` for its input ``[batch_size, channels, height, width]``: each bin's gradient
    spread over its samples' four bilinear corners with the forward weights."""
    grad_input = torch.zeros(batch_size, height, width, channels, dtype=_acc(grad).dtype)
    for r, roi in enumerate(rois.tolist()):
        ys, xs, grid_h, grid_w = _roi_grid(roi, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned,
                                           grad_input.dtype)
        if grid_h * grid_w == 0:
            continue
        per_sample = _acc(grad[r]).repeat_interleave(grid_h, 1).repeat_interleave(grid_w, 2).permute(1, 2, 0)
        target = grad_input[int(roi[0])]
        for yi, xi, w in _corners(ys, xs, height, width, grid_h * grid_w):
            index = (yi[:, None].expand(w.shape), xi[None, :].expand(w.shape))
            target.index_put_(index, per_sample * w.unsqueeze(-1), accumulate=True)
    return grad_input.permute(0, 3, 1, 2).contiguous().to(grad.dtype)


def _roi_align_setup(ctx, inputs, output) -> None:
    input, rois, *args = inputs
    ctx.save_for_backward(rois)
    ctx.shape = tuple(input.shape)
    ctx.args = args


def _roi_align_grad(ctx, grad):
    (rois,) = ctx.saved_tensors
    scale, ph, pw, ratio, aligned = ctx.args
    n, c, h, w = ctx.shape
    grad_input = torch.ops.diopi.roi_align_backward(grad, rois, scale, ph, pw, n, c, h, w, ratio, aligned)
    return grad_input, None, None, None, None, None, None


register_autograd("diopi::roi_align", _roi_align_grad, setup_context=_roi_align_setup)


@custom_op("diopi::nms", mutates_args=(), schema="(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor")
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: visiting boxes (``[N, 4]``, ``x1, y1, x2, y2``) by decreasing score (ties
    by index), keep a box unless its IoU with an already kept box exceeds ``iou_threshold``. Returns the kept
    indices (int64) in that order."""
    order = torch.sort(scores, descending=True, stable=True).indices
    b = _acc(boxes)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    top_left = torch.maximum(b[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(b[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(-1)
    iou = inter / (area[:, None] + area[None, :] - inter)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


@register_fake("diopi::rms_norm")
def _rms_norm_fake(input, weight, eps):
    return torch.empty_like(input), input.new_empty(input.shape[:-1], dtype=_stat_dtype(input))


@register_fake("diopi::rotary_embedding")
def _rotary_fake(input, cos, sin, interleaved=False):
    return torch.empty_like(input)


@register_fake("diopi::silu_and_mul")
def _silu_and_mul_fake(input):
    return input.new_empty(*input.shape[:-1], input.shape[-1] // 2)


# ---------------------------------------------------------------------------------------------- tensor statistics
#: What ``diopi::tensor_stats`` returns for each tensor, one group of ``len(tensors)`` numbers per column: min,
#: max, sum and 2-norm over the finite elements, then how many elements are not finite and how many are NaN.
TENSOR_STATS_COLUMNS = ("min", "max", "sum", "norm", "non_finite", "nan")


def _column_stats(t: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    finite = torch.isfinite(t)
    zeroed = torch.where(finite, t, 0).to(dtype)
    if t.numel() == 0:
        low = high = torch.tensor(math.nan, dtype=dtype, device=t.device)
    else:
        low = torch.where(finite, t, math.inf).amin().to(dtype)
        high = torch.where(finite, t, -math.inf).amax().to(dtype)
        none_finite = ~finite.any()
        low = torch.where(none_finite, math.nan, low)
        high = torch.where(none_finite, math.nan, high)
    return [low, high, zeroed.sum(), torch.linalg.vector_norm(zeroed), (~finite).sum().to(dtype),
            torch.isnan(t).sum().to(dtype)]


def tensor_stats(tensors: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Statistics of floating tensors without reading them on the host: a 1-D tensor of ``dtype`` on their
    device with ``len(TENSOR_STATS_COLUMNS) * len(tensors)`` numbers, column after column (all minima, then all
    maxima, ...). min and max of a tensor with no finite element are NaN. The one statistics operator of the
    tools (op_tools' ``stats_of``/``device_stats``, OpCapture statistics, module dumps): any device reduces
    with the few device operators below, a vendor in one kernel, the CPU by :func:`tensor_stats_row`."""
    if not tensors:
        raise ValueError("diopi::tensor_stats needs at least one tensor")
    rows = [_column_stats(t.detach(), dtype) for t in tensors]
    return torch.stack([rows[i][c] for c in range(len(TENSOR_STATS_COLUMNS)) for i in range(len(tensors))])


def _tensor_stats_fake(tensors: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    return tensors[0].new_empty(len(TENSOR_STATS_COLUMNS) * len(tensors), dtype=dtype)


def tensor_stats_row(t: torch.Tensor) -> tuple[float, ...]:
    """One host tensor's :data:`TENSOR_STATS_COLUMNS` as Python numbers (the CPU kernel): the sum by torch's
    cascade summation and the sum of squares by a BLAS dot product, in the tensor's precision (float64 when
    they overflow it), min and max in one pass (``torch.aminmax``); a tensor holding NaN or Inf takes a slower
    path that counts them. Complex tensors count by magnitude, integers of 4 bytes or more in float64, other
    non-float32/64 tensors in float32."""
    n = t.numel()
    if n == 0:
        return (math.nan, math.nan, 0.0, 0.0, 0, 0)
    if t.requires_grad:
        t = t.detach()
    if t.is_complex():
        t = t.abs()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32 if t.is_floating_point() or t.dtype == torch.bool or t.element_size() < 4
                 else torch.float64)
    v = t if t.dim() == 1 else t.reshape(-1)
    total = v.sum().item()  # vectorized, error growing with log(n)
    if math.isfinite(total):  # no NaN or Inf: three passes, min and max in one
        mn, mx = torch.aminmax(v)
        sumsq = torch.dot(v, v).item()
        if math.isinf(sumsq):  # the squares overflow the tensor's precision
            sumsq = torch.dot(v.double(), v.double()).item()
        return (mn.item(), mx.item(), total, math.sqrt(sumsq), 0, 0)
    a = v.numpy()
    kept = a[np.isfinite(a)]
    nan = int(np.count_nonzero(np.isnan(a)))
    if kept.size == 0:
        return (math.nan, math.nan, 0.0, 0.0, n, nan)
    wide = kept.astype(np.float64)  # finite values whose sum overflowed the tensor's precision, or the rest
    return (float(kept.min()), float(kept.max()), float(wide.sum()), math.sqrt(float(np.dot(wide, wide))),
            n - int(kept.size), nan)


def _tensor_stats_cpu(tensors: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    if not tensors:
        raise ValueError("diopi::tensor_stats needs at least one tensor")
    rows = [tensor_stats_row(t) for t in tensors]
    return torch.tensor([row[c] for c in range(len(TENSOR_STATS_COLUMNS)) for row in rows], dtype=dtype)


# Defined with torch.library directly rather than custom_op: tools call it once per operator call, and custom_op's
# Python layers would cost more than the reduction of a few small tensors.
_TENSOR_STATS_LIBRARY = torch.library.Library("diopi", "FRAGMENT")
_TENSOR_STATS_LIBRARY.define("tensor_stats(Tensor[] tensors, ScalarType dtype) -> Tensor")
_TENSOR_STATS_LIBRARY.impl("tensor_stats", tensor_stats, "CompositeExplicitAutograd")
_TENSOR_STATS_LIBRARY.impl("tensor_stats", _tensor_stats_cpu, "CPU")
register_fake("diopi::tensor_stats", _tensor_stats_fake, lib=_TENSOR_STATS_LIBRARY)
