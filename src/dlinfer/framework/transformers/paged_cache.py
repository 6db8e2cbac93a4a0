"""``PagedCache``: transformers' ``Cache`` over per-layer block pools, in dlinfer's cache layout."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers.cache_utils import Cache

from .block_manager import BlockManager
from .context import StepContext, build_context, decode_context

__all__ = ["PagedCache"]


class PagedCache(Cache):
    """Per-layer key/value block pools ``(num_blocks, block_size, num_kv_heads, head_dim)`` (int8 with float32
    scale/zero pools ``(num_blocks, block_size, num_kv_heads)`` when ``kv_quant_bits=8``), a
    :class:`BlockManager` shared by the layers, and the per-step :class:`StepContext`.

    :meth:`prepare_step` is the one bookkeeping call per forward (blocks, slots, lengths); the layers only read
    ``self.context`` and the pools. transformers sees the padded length of the batch (``get_seq_length``), the
    kernels see each sequence's real length. With ``num_kv_heads``/``head_dim`` the pools are allocated up front;
    without them (``None``), each layer's pools are allocated at its first write, in that layer's key layout (models
    whose layers differ in heads or head_dim).
    """

    def __init__(self, *, num_layers: int, num_kv_heads: int | None, head_dim: int | None, batch_size: int,
                 num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str, max_seq_len: int,
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
        self.dtype = dtype
        self.device = torch.device(device)
        self.key_pools: list[Tensor | None] = [None] * num_layers
        self.value_pools: list[Tensor | None] = [None] * num_layers
        # (k_scale, k_zero, v_scale, v_zero) per layer, for the int8 cache
        self.quant_pools: list[tuple[Tensor, Tensor, Tensor, Tensor] | None] = [None] * num_layers
        if num_kv_heads is not None and head_dim is not None:
            for layer in range(num_layers):
                self._allocate(layer, num_kv_heads, head_dim)
        self.cached = [0] * batch_size  # real tokens cached per sequence
        self.seen = 0                   # the padded length transformers sees
        self.context: StepContext | None = None
        self.pending = False            # a forward began and its context is not built yet
        self.written: set[int] = set()  # layers written since the cache was made (their pools are in use)
        self.updated: set[int] = set()  # layers whose module called update() in the running forward
        self.attended: set[int] = set()  # layers the dlinfer attention ran for in the running forward
        self.last_updated: int | None = None  # the layer of the latest update() (modules without layer_idx)
        self.updated_ids: dict[int, tuple[int, int]] = {}  # layer -> ids of the key/value update() handed back
        #: layer -> the sliding window stock's cache keeps for it (DynamicCache's sliding layers hold the last
        #: ``window - 1`` tokens, whatever the mask says); set by install()
        self.layer_windows: dict[int, int] = {}
        self.in_forward = False         # between begin_forward() and end_forward()
        self.inflight = 0               # new tokens of the running forward, already counted in seen

    def _allocate(self, layer: int, num_kv_heads: int, head_dim: int) -> None:
        shape = (self.manager.num_blocks, self.block_size, num_kv_heads, head_dim)
        pool_dtype = torch.int8 if self.kv_quant_bits == 8 else self.dtype
        self.key_pools[layer] = torch.zeros(shape, dtype=pool_dtype, device=self.device)
        self.value_pools[layer] = torch.zeros(shape, dtype=pool_dtype, device=self.device)
        if self.kv_quant_bits == 8:
            self.quant_pools[layer] = tuple(  # type: ignore[assignment]
                torch.zeros(shape[:-1], dtype=torch.float32, device=self.device) for _ in range(4))

    # -- the per-step bookkeeping ---------------------------------------------------------------------------
    def begin_forward(self) -> None:
        """Mark that a forward starts: its context is built by the next :meth:`prepare_step` (or lazily by the
        first attention layer when no padding mask reaches the cache)."""
        self.pending = True
        self.in_forward = True
        self.inflight = 0
        self.updated.clear()
        self.updated_ids.clear()
        self.attended.clear()

    def end_forward(self, check: bool = True) -> None:
        """The forward ended; with ``check`` (it returned), check it: every layer that handed its keys to
        :meth:`update` ran the dlinfer attention too (otherwise its attention read only the new tokens), and some
        layer did. One-line error."""
        self.in_forward = False
        self.inflight = 0
        self.updated_ids.clear()
        if not check:
            return
        missed = self.updated - self.attended
        if missed:
            raise ValueError(f"dlinfer: layer(s) {sorted(missed)} called cache.update() but not transformers'"
                             " attention interface (ALL_ATTENTION_FUNCTIONS), so the paged cache cannot serve them")
        if not self.attended:
            raise ValueError("dlinfer: no layer called transformers' attention interface (ALL_ATTENTION_FUNCTIONS);"
                             " this model's attention cannot run over the paged cache")

    def prepare_step(self, q_len: int, token_mask: Tensor | None = None, judged: bool = False) -> StepContext:
        """Build the context of a forward of ``q_len`` new tokens per row; ``token_mask`` ``(batch, q_len)``
        (True/1 = real token, 0 = padding) comes from the 2-D attention mask. Reserves blocks, computes slots and
        lengths, stores and returns the context (``judged``: the mask function builds it, for a plain causal mask
        kind). Raises a one-line error when a sequence would outgrow ``max_seq_len`` or the block pool runs out."""
        if token_mask is not None and tuple(token_mask.shape) != (self._batch_size, q_len):
            raise ValueError(f"dlinfer paged cache: token mask of shape {tuple(token_mask.shape)}, expected"
                             f" ({self._batch_size}, {q_len})")
        if self.seen + q_len > self.max_seq_len:
            raise ValueError(f"dlinfer paged cache: {self.seen + q_len} tokens exceed the cache's max_seq_len"
                             f" {self.max_seq_len}")
        decoding = q_len == 1 and self.context is not None and min(self.cached) > 0 and (
            token_mask is None or bool(token_mask.all()))
        if decoding:  # the hot path: from the previous step's context
            self.context = decode_context(self.manager, self.cached, self.context, self.device)  # type: ignore[arg-type]
        else:
            if token_mask is None:
                valid = [[True] * q_len for _ in range(self._batch_size)]
            else:
                valid = [[bool(v) for v in row] for row in token_mask.detach().to("cpu").tolist()]
            self.context = build_context(self.manager, self.cached, valid, self.device)
        self.context.mask_judged = judged
        self.attended.clear()
        self.seen += q_len
        if self.in_forward:  # until the forward ends, transformers asks for the sizes before this step
            self.inflight = q_len
        self.pending = False
        return self.context

    def step_context(self, q_len: int, token_mask: Tensor | None = None, judged: bool = False) -> StepContext:
        """The context of the running forward: built now (from ``token_mask``, or without padding) when no call
        built it yet in this forward, else the one built (several mask kinds per forward share it)."""
        if self.pending or self.context is None:
            return self.prepare_step(q_len, token_mask, judged)
        if self.context.q_len != q_len:
            raise ValueError(f"dlinfer paged cache: a mask for {q_len} new tokens in a forward of"
                             f" {self.context.q_len}")
        return self.context

    def layer_pools(self, layer_idx: int, num_kv_heads: int | None = None, head_dim: int | None = None,
                    ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor] | None]:
        """(key pool, value pool, (k_scale, k_zero, v_scale, v_zero) or None) of ``layer_idx``. With
        ``num_kv_heads``/``head_dim`` (the layer's key layout), the pools are allocated (or, before the layer's
        first write, re-allocated) to fit; a written layer whose layout changes is an error."""
        keys = self.key_pools[layer_idx] if 0 <= layer_idx < self.num_layers else None
        if keys is not None and keys.shape[2] == num_kv_heads and keys.shape[3] == head_dim:  # every later step
            return keys, self.value_pools[layer_idx], self.quant_pools[layer_idx]  # type: ignore[return-value]
        if not 0 <= layer_idx < self.num_layers:
            raise IndexError(f"dlinfer paged cache: layer {layer_idx} out of range (0..{self.num_layers - 1})")
        if num_kv_heads is not None and head_dim is not None and (
                keys is None or tuple(keys.shape[2:]) != (num_kv_heads, head_dim)):
            if keys is not None and layer_idx in self.written:
                raise ValueError(f"dlinfer paged cache: layer {layer_idx} holds keys of {tuple(keys.shape[2:])}"
                                 f" (heads, head_dim), got ({num_kv_heads}, {head_dim})")
            self._allocate(layer_idx, num_kv_heads, head_dim)
            keys = self.key_pools[layer_idx]
        if keys is None:
            raise ValueError(f"dlinfer paged cache: layer {layer_idx} has no pools yet (give its key layout)")
        return keys, self.value_pools[layer_idx], self.quant_pools[layer_idx]  # type: ignore[return-value]

    # -- transformers' Cache interface ------------------------------------------------------------------------
    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[Tensor, Tensor]:
        """A stock attention module hands over its new keys and values: they come back unchanged (the ``"dlinfer"``
        attention function writes them to the pools and reads the cached ones); the layer is noted so that
        :meth:`end_forward` can check that its attention went through the dlinfer function."""
        self.updated.add(layer_idx)
        self.updated_ids[layer_idx] = (id(key_states), id(value_states))
        self.last_updated = layer_idx
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen - self.inflight

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.seen - self.inflight + query_length, 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.seen - self.inflight

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
        self.in_forward = False
        self.inflight = 0
        self.written.clear()

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
