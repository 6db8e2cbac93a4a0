"""The block manager of the paged KV cache: a free list of block ids, handed to sequences as they grow."""

from __future__ import annotations

import random

__all__ = ["BlockManager", "BlockPoolExhausted"]


class BlockPoolExhausted(RuntimeError):
    """The block pool has fewer free blocks than a step needs."""


class BlockManager:
    """``num_blocks`` blocks of ``block_size`` token slots; each sequence owns a list of blocks (its block table
    row). ``shuffle_seed`` shuffles the free list once (tests use it so that a sequence's blocks are not
    contiguous, which catches kernels that ignore the block table)."""

    def __init__(self, num_blocks: int, block_size: int, shuffle_seed: int | None = None) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks))
        if shuffle_seed is not None:
            random.Random(shuffle_seed).shuffle(self._free)
        self._free.reverse()  # pop() from the end hands blocks out in list order
        self.tables: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        """Blocks not owned by any sequence."""
        return len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def reserve(self, lengths: dict[int, int]) -> None:
        """Grow each sequence ``seq -> new total length`` to enough blocks, all or nothing: raises
        :class:`BlockPoolExhausted` (naming the shortfall) before taking any block when the pool is too small."""
        need = {seq: self.blocks_for(n) - len(self.tables.get(seq, ())) for seq, n in lengths.items()}
        total = sum(max(0, n) for n in need.values())
        if total > len(self._free):
            raise BlockPoolExhausted(
                f"dlinfer paged cache: block pool exhausted: this step needs {total} more blocks of {self.block_size}"
                f" tokens, {len(self._free)} of {self.num_blocks} are free (raise num_blocks)")
        for seq, n in need.items():
            table = self.tables.setdefault(seq, [])
            for _ in range(n):
                table.append(self._free.pop())

    def slot(self, seq: int, position: int) -> int:
        """The flat slot ``block * block_size + offset`` of ``seq``'s token at ``position``."""
        block = self.tables[seq][position // self.block_size]
        return block * self.block_size + position % self.block_size

    def free(self, seq: int) -> None:
        """Give ``seq``'s blocks back to the pool."""
        self._free.extend(reversed(self.tables.pop(seq, [])))
