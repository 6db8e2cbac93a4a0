"""The attention metadata of one LMDeploy engine step, in the form LMDeploy's dlinfer kernels read it.

One builder for every device: device tensors stay on the device (no per-sequence Python loop), and the two host
copies the kernels take (cumulative query ends, kv lengths) come from one device-to-host copy per step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

__all__ = ["build_attention_metadata", "new_token_slots"]


def new_token_slots(block_offsets: Tensor, q_seqlens: Tensor, kv_seqlens: Tensor, q_start_loc: Tensor,
                    block_size: int, num_tokens: int) -> Tensor:
    """The flat cache slot (``block * block_size + offset``) of every new token, in packed order: sequence ``b``'s
    new tokens sit at positions ``kv_seqlens[b] - q_seqlens[b]`` .. ``kv_seqlens[b] - 1``."""
    device = q_seqlens.device
    q_lens = q_seqlens.to(torch.int64)
    seq = torch.repeat_interleave(torch.arange(q_lens.shape[0], device=device), q_lens, output_size=num_tokens)
    first = (kv_seqlens.to(torch.int64) - q_lens)[seq]
    pos = first + torch.arange(num_tokens, device=device) - q_start_loc.to(torch.int64)[seq]
    blocks = block_offsets.to(torch.int64)[seq, pos // block_size]
    return blocks * block_size + pos % block_size


def build_attention_metadata(meta_cls: type, step_context: Any) -> Any:
    """An instance of ``meta_cls`` (LMDeploy's ``DlinferAttentionMetadata``) for ``step_context``; only the fields
    ``meta_cls`` declares are passed, so other LMDeploy releases' metadata classes take what they know."""
    k_cache = step_context.kv_caches[0][0]
    block_size = int(k_cache.shape[1])
    q_seqlens, kv_seqlens = step_context.q_seqlens, step_context.kv_seqlens
    host = torch.stack((q_seqlens.to(torch.int64), kv_seqlens.to(torch.int64))).cpu()  # the step's one sync
    q_host, kv_host = host[0], host[1]
    cu_q_host = torch.cat((q_host.new_zeros(1), q_host.cumsum(0))).to(torch.int32)
    num_tokens = int(cu_q_host[-1])
    device = q_seqlens.device
    cu_seqlens_q = cu_q_host.to(device, non_blocking=True)
    q_start_loc = cu_seqlens_q[:-1]
    is_decoding = bool(step_context.is_decoding)
    slots = new_token_slots(step_context.block_offsets, q_seqlens, kv_seqlens, q_start_loc, block_size, num_tokens)
    values = {
        "is_decoding": is_decoding,
        "block_offsets": step_context.block_offsets.to(torch.int32),
        "q_start_loc": q_start_loc,
        "q_seqlens": q_seqlens.to(torch.int32),
        "kv_seqlens": kv_seqlens.to(torch.int32),
        "cu_seqlens_q": cu_seqlens_q,
        "kv_start_indices": slots,
        "block_size": block_size,
        "attention_mask": (),
        "is_prefill_no_cache": (not is_decoding) and bool(torch.equal(q_host, kv_host)),
        "max_q_seqlen": int(q_host.max()) if q_host.numel() else 0,
        "max_kv_seq_len": int(kv_host.max()) if kv_host.numel() else 0,
        "cu_seqlens_q_cpu": cu_q_host,
        "kv_seqlens_cpu": kv_host.to(torch.int32),
        "quant_policy": getattr(step_context, "kv_quant_policy", 0),
    }
    names = {f.name for f in dataclasses.fields(meta_cls)}
    return meta_cls(**{k: v for k, v in values.items() if k in names})
