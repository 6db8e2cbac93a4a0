"""``PagedCache``: transformers' ``Cache`` over per-layer block pools, in dlinfer's cache layout."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers.cache_utils import Cache

from .block_manager import BlockManager
from .context import StepContext, build_context

__all__ = ["PagedCache"]


class PagedCache(Cache):
    """Per-layer key/value block pools ``(num_blocks, block_size, num_kv_heads, head_dim)`` (int8 with float32
    scale/zero pools ``(num_blocks, block_size, num_kv_heads)`` when ``kv_quant_bits=8``), a
    :class:`BlockManager` shared by the layers, and the per-step :class:`StepContext`.

    :meth:`prepare_step` is the one bookkeeping call per forward (blocks, slots, lengths); the layers only read
    ``self.context`` and the pools. transformers sees the padded length of the batch (``get_seq_length``), the
    kernels see each sequence's real length.
    """

    def __init__(self, *, num_layers: int, num_kv_heads: int, head_dim: int, batch_size: int, num_blocks: int,
                 block_size: int, dtype: torch.dtype, device: torch.device | str, max_seq_len: int,
                 kv_quant_bits: int = 0, shuffle_seed: int | None = None) -> None:
        super().__init__(layers=[])
        if kv_quant_bits not in (0, 8):
            raise ValueError(f"kv_quant_bits must be 0 or 8, got {kv_quant_bits}")
        self.manager = BlockManager(num_blocks, block_size, shuffle_seed)
        self.block_size = block_size
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.kv_quant_bits = kv_quant_bits
        self.num_layers = num_layers
        self._batch_size = batch_size
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        pool_dtype = torch.int8 if kv_quant_bits == 8 else dtype
        self.key_pools = [torch.zeros(shape, dtype=pool_dtype, device=device) for _ in range(num_layers)]
        self.value_pools = [torch.zeros(shape, dtype=pool_dtype, device=device) for _ in range(num_layers)]
        # (k_scale, k_zero, v_scale, v_zero) per layer, for the int8 cache
        self.quant_pools: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
        if kv_quant_bits == 8:
            qshape = shape[:-1]
            self.quant_pools = [tuple(torch.zeros(qshape, dtype=torch.float32, device=device) for _ in range(4))
                                for _ in range(num_layers)]
        self.device = torch.device(device)
        self.cached = [0] * batch_size  # real tokens cached per sequence
        self.seen = 0                   # the padded length transformers sees
        self.context: StepContext | None = None
        self.pending = False            # a forward began and its context is not built yet

    # -- the per-step bookkeeping ---------------------------------------------------------------------------
    def begin_forward(self) -> None:
        """Mark that a forward starts: its context is built by the next :meth:`prepare_step` (or lazily by the
        first attention layer when no padding mask reaches the cache)."""
        self.pending = True

    def prepare_step(self, q_len: int, token_mask: Tensor | None = None) -> StepContext:
        """Build the context of a forward of ``q_len`` new tokens per row; ``token_mask`` ``(batch, q_len)``
        (True/1 = real token, 0 = padding) comes from the 2-D attention mask. Reserves blocks, computes slots and
        lengths, stores and returns the context. Raises a one-line error when a sequence would outgrow
        ``max_seq_len`` or the block pool runs out."""
        if token_mask is None:
            valid = [[True] * q_len for _ in range(self._batch_size)]
        else:
            if tuple(token_mask.shape) != (self._batch_size, q_len):
                raise ValueError(f"dlinfer paged cache: token mask of shape {tuple(token_mask.shape)}, expected"
                                 f" ({self._batch_size}, {q_len})")
            valid = [[bool(v) for v in row] for row in token_mask.detach().to("cpu").tolist()]
        if self.seen + q_len > self.max_seq_len:
            raise ValueError(f"dlinfer paged cache: {self.seen + q_len} tokens exceed the cache's max_seq_len"
                             f" {self.max_seq_len}")
        self.context = build_context(self.manager, self.cached, valid, self.device)
        self.seen += q_len
        self.pending = False
        return self.context

    def step_context(self, q_len: int) -> StepContext:
        """The context of the running forward (built now, without padding, if nothing built it yet)."""
        if self.pending or self.context is None:
            return self.prepare_step(q_len)
        return self.context

    def layer_pools(self, layer_idx: int) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor] | None]:
        """(key pool, value pool, (k_scale, k_zero, v_scale, v_zero) or None) of ``layer_idx``."""
        if not 0 <= layer_idx < self.num_layers:
            raise IndexError(f"dlinfer paged cache: layer {layer_idx} out of range (0..{self.num_layers - 1})")
        quant = self.quant_pools[layer_idx] if self.quant_pools else None
        return self.key_pools[layer_idx], self.value_pools[layer_idx], quant

    # -- transformers' Cache interface ------------------------------------------------------------------------
    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[Tensor, Tensor]:
        raise RuntimeError("PagedCache is written by the 'dlinfer' attention implementation only; this model's"
                           " attention is not 'dlinfer' (call dlinfer.framework.transformers.install(model))")

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.seen + query_length, 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.seen

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self.max_seq_len

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return True

    @property
    def is_croppable(self) -> bool:
        return False

    def reset(self) -> None:
        """Give every block back and forget every sequence."""
        for seq in list(self.manager.tables):
            self.manager.free(seq)
        self.cached = [0] * self._batch_size
        self.seen = 0
        self.context = None
        self.pending = False

    def _unsupported(self, what: str) -> None:
        raise NotImplementedError(f"PagedCache does not support {what} (beam search / assisted decoding)")

    def reorder_cache(self, beam_idx: Tensor) -> None:
        self._unsupported("reorder_cache")

    def crop(self, tokens_to_remove: int) -> None:
        self._unsupported("crop")

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._unsupported("batch_repeat_interleave")

    def batch_select_indices(self, indices: Tensor) -> None:
        self._unsupported("batch_select_indices")

    def __repr__(self) -> str:
        return (f"PagedCache(layers={self.num_layers}, blocks={self.manager.num_blocks}x{self.block_size},"
                f" kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, quant_bits={self.kv_quant_bits},"
                f" seen={self.seen})")
