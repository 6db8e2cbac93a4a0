"""The ``"dlinfer"`` mask function: how the batch's padding and the mask kind reach the paged attention.

transformers calls the mask function registered for the attention implementation once per mask kind and forward
(``create_causal_mask``, ``create_sliding_window_causal_mask``, ...), before the decoder layers, with the 2-D
padding mask and the kind's ``mask_function`` (``(batch, head, q_idx, kv_idx) -> allowed``). The first call builds
the step's context (:meth:`PagedCache.step_context`) from the new tokens' columns of the padding mask; every call
returns that context with the kind's sliding window (``StepContext.window``, ``mask_judged=True``). The kind is
judged from what its ``mask_function`` computes on this step's positions, not from its name: plain causal, or
causal limited to a window (``p - w < k <= p``, transformers' rule). Anything else (bidirectional, chunked,
prefix-LM, block overlays) is refused with a one-line ``ValueError`` naming the mask builder (raised by the first
layer that uses that mask kind: a model may build kinds none of its layers use), never approximated.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch
from torch import Tensor
from transformers.masking_utils import causal_mask_function

__all__ = ["dlinfer_mask", "mask_window"]

#: at most this many (query, key) pairs are evaluated per mask kind and step; longer steps evaluate spread rows
_MAX_CELLS = 1 << 16


def _builder_name() -> str:
    """The transformers function that asked for the mask (``create_chunked_causal_mask``, ...), for messages."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_name
        if name.startswith("create_") and "mask" in name:
            return name
        frame = frame.f_back  # type: ignore[assignment]
    return "the model's mask builder"


def mask_window(mask_function: Any, batch: int, q_positions: Tensor, kv_length: int, kv_offset: int = 0) -> int | None:
    """The sliding window of ``mask_function`` on these positions (``None``: plain causal), or a ``ValueError`` when
    it is neither causal nor a causal sliding window. Evaluated on the CPU by broadcasting index tensors, as
    transformers' non-vmap mask expansion does."""
    if mask_function is None or mask_function is causal_mask_function:
        return None
    q_pos = q_positions.to("cpu", torch.long)
    if q_pos.numel() * kv_length > _MAX_CELLS:  # long prompts: spread rows, the first and the last included
        rows = torch.linspace(0, q_pos.numel() - 1, steps=max(2, _MAX_CELLS // max(kv_length, 1))).long()
        q_pos = q_pos[rows.unique()]
    kv_pos = torch.arange(kv_length, dtype=torch.long) + int(kv_offset)
    b = torch.arange(batch, dtype=torch.long)[:, None, None, None]
    h = torch.zeros(1, dtype=torch.long)[None, :, None, None]
    try:
        allowed = torch.as_tensor(mask_function(b, h, q_pos[None, None, :, None], kv_pos[None, None, None, :]))
        allowed = allowed.to("cpu", torch.bool).expand(batch, 1, q_pos.numel(), kv_length)[:, 0]
    except Exception as exc:  # a mask that reads model data (image tokens, ...) on another device
        raise ValueError(f"dlinfer attention: the mask of {_builder_name()} cannot be judged on index positions"
                         f" ({type(exc).__name__}: {exc}); unsupported by the paged attention") from None
    distance = q_pos[:, None] - kv_pos[None, :]                               # (Q, K): query minus key position
    causal = distance >= 0
    if torch.equal(allowed, causal.expand_as(allowed)):
        return None
    outside = causal & ~allowed                                               # (B, Q, K): causal, yet masked
    if bool(outside.any()):
        window = int(distance.expand_as(outside)[outside].min())
        if window > 0 and torch.equal(allowed, (causal & (distance < window)).expand_as(allowed)):
            return window
    raise ValueError(f"dlinfer attention: the mask of {_builder_name()} is neither causal nor a causal sliding window"
                     " (bidirectional, chunked or overlaid attention); unsupported by the paged attention")


def dlinfer_mask(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: int = 0,
                 mask_function: Any = None, attention_mask: Tensor | None = None, **kwargs: Any) -> Any:
    """transformers' mask interface: the step's context (built from the 2-D padding mask's last ``q_length``
    columns at the first call of a forward) with this mask kind's window (``None``: plain causal, or a window no
    query of the step exceeds); without an installed model's running cache, the mask as given."""
    from .attention import active_cache

    cache = active_cache()
    if cache is None:
        return attention_mask
    token_mask = None
    if attention_mask is not None:
        if attention_mask.ndim != 2:
            raise ValueError(f"dlinfer attention takes a 2-D padding mask, got shape {tuple(attention_mask.shape)}")
        token_mask = attention_mask[:, -q_length:]
    context = cache.step_context(q_length, token_mask, judged=True)
    if mask_function is None or mask_function is causal_mask_function:  # the common kind: no judging needed
        return context
    offset = int(q_offset) if not isinstance(q_offset, Tensor) else int(q_offset.reshape(-1)[0])
    positions = torch.arange(offset, offset + q_length)
    try:
        window = mask_window(mask_function, batch_size, positions, kv_length, kv_offset)
    except ValueError as exc:  # refused where a layer uses this mask kind (a model may build kinds it never uses)
        return dataclasses.replace(context, mask_judged=True, mask_problem=str(exc))
    return context if window is None else dataclasses.replace(context, window=window, mask_judged=True)
