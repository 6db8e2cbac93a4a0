"""The per-step context: what every layer's attention reads about the batch, built once per forward."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .block_manager import BlockManager

__all__ = ["StepContext", "build_context", "decode_context"]


@dataclass
class StepContext:
    """The lengths and slots of one forward (the conventions of ``dlinfer.ops.llm``), on the model's device.

    ``token_index`` lists, for each packed (non-padding) new token, its flat index in the ``(batch * q_len)``
    grid of the forward's input; it is ``None`` when no new token is padding (the grid is the packed tensor).
    ``window``/``mask_judged``: what the mask function found for one mask kind (mask.py); a context built by
    :meth:`PagedCache.prepare_step` has not been judged, and the attention takes the module's declared window.
    """

    block_table: Tensor        # (batch, max_blocks_per_seq) int32
    kv_seq_len: Tensor         # (batch,) int32: cached + new tokens per sequence
    q_seq_len: Tensor          # (batch,) int32: new (non-padding) tokens per sequence
    q_start_loc: Tensor        # (batch,) int32: first packed token of each sequence
    q_end_loc: Tensor          # (batch,) int32: one past the last packed token of each sequence (cumulative)
    kv_indices: Tensor         # (num_new_tokens,) int64: flat cache slot of each packed token
    token_index: Tensor | None  # (num_new_tokens,) int64, or None without padding
    max_q_seq_len: int
    max_kv_seq_len: int
    is_decoding: bool          # one new token per sequence, every sequence has cached tokens
    has_past: bool             # some sequence has cached tokens (paged prefill when not decoding)
    batch_size: int
    q_len: int                 # the forward's padded query length
    window: int | None = None  # the sliding window the mask kind asks for this step (None: plain causal)
    mask_judged: bool = False  # built by the mask function for one mask kind (window is that kind's)
    mask_problem: str | None = None  # why that mask kind cannot run over the paged attention (raised if used)
    token_rotary: tuple | None = None  # (cos, sin, their token-layout forms): attention.token_rotary, once per step


def build_context(manager: BlockManager, cached: list[int], valid: list[list[bool]],
                  device: torch.device) -> StepContext:
    """Reserve blocks for the new tokens of each sequence (``valid[b][i]``: token ``i`` of row ``b`` is real,
    not padding) after ``cached[b]`` cached tokens, and return the step's context. ``cached`` is updated."""
    batch, q_len = len(valid), len(valid[0]) if valid else 0
    q_lens = [sum(row) for row in valid]
    manager.reserve({b: cached[b] + q_lens[b] for b in range(batch)})
    slots: list[int] = []
    flat: list[int] = []
    for b, row in enumerate(valid):
        position = cached[b]
        for i, real in enumerate(row):
            if real:
                slots.append(manager.slot(b, position))
                flat.append(b * q_len + i)
                position += 1
    kv_lens = [cached[b] + q_lens[b] for b in range(batch)]
    rows = [manager.tables.get(b, []) for b in range(batch)]
    width = max(1, max(len(r) for r in rows))
    starts = [0] * batch
    for b in range(1, batch):
        starts[b] = starts[b - 1] + q_lens[b - 1]
    has_past = any(c > 0 for c in cached)
    padded = len(flat) != batch * q_len
    # few host tensors, one copy each to the device
    kv_seq_len, q_seq_len, q_start_loc, q_end_loc = torch.tensor(
        [kv_lens, q_lens, starts, [s + n for s, n in zip(starts, q_lens, strict=True)]], dtype=torch.int32,
        device=device).unbind(0)
    table = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32, device=device)
    indices = torch.tensor([slots, flat] if padded else [slots], dtype=torch.int64, device=device).unbind(0)
    ctx = StepContext(
        block_table=table,
        kv_seq_len=kv_seq_len,
        q_seq_len=q_seq_len,
        q_start_loc=q_start_loc,
        q_end_loc=q_end_loc,
        kv_indices=indices[0],
        token_index=indices[1] if padded else None,
        max_q_seq_len=max(q_lens, default=0),
        max_kv_seq_len=max(kv_lens, default=0),
        is_decoding=q_len == 1 and not padded and all(c > 0 for c in cached),
        has_past=has_past,
        batch_size=batch,
        q_len=q_len,
    )
    for b in range(batch):
        cached[b] = kv_lens[b]
    return ctx


def decode_context(manager: BlockManager, cached: list[int], previous: StepContext,
                   device: torch.device) -> StepContext:
    """The context of a decode step (one real new token per sequence, every sequence with cached tokens), built
    from the previous step's: a block is reserved only where a sequence starts a new one (the block table is
    rebuilt only then); the slots and lengths are two small host tensors. ``cached`` is updated."""
    block_size = manager.block_size
    batch = len(cached)
    starting = {b: n + 1 for b, n in enumerate(cached) if n % block_size == 0}
    table = previous.block_table
    free = manager.num_free
    if starting:
        manager.reserve(starting)
    if manager.num_free != free:  # a sequence took a new block: the table changes (else the same tensor is kept)
        rows = [manager.tables.get(b, []) for b in range(batch)]
        width = max(len(r) for r in rows)
        table = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32, device=device)
    tables = manager.tables
    slots = [tables[b][n // block_size] * block_size + n % block_size for b, n in enumerate(cached)]
    for b in range(batch):
        cached[b] += 1
    if previous.is_decoding and previous.batch_size == batch:  # one token per sequence: the same every step
        ones, starts, ends = previous.q_seq_len, previous.q_start_loc, previous.q_end_loc
    else:
        steps = torch.arange(batch + 1, dtype=torch.int32)
        ones = torch.ones(batch, dtype=torch.int32).to(device)
        starts, ends = steps[:-1].to(device), steps[1:].to(device)
    return StepContext(
        block_table=table,
        kv_seq_len=torch.tensor(cached, dtype=torch.int32, device=device),
        q_seq_len=ones,
        q_start_loc=starts,
        q_end_loc=ends,
        kv_indices=torch.tensor(slots, dtype=torch.int64, device=device),
        token_index=None,
        max_q_seq_len=1,
        max_kv_seq_len=max(cached),
        is_decoding=True,
        has_past=True,
        batch_size=batch,
        q_len=1,
    )
