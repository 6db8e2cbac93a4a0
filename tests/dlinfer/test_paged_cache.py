"""The paged KV cache's bookkeeping: the block manager's free list, the per-step context (slots, lengths,
padding) and PagedCache's view for transformers."""

from __future__ import annotations

import pytest
import torch

from dlinfer.framework.transformers import BlockManager, BlockPoolExhausted, PagedCache
from dlinfer.framework.transformers.context import build_context


def _cache(**overrides) -> PagedCache:
    options = dict(num_layers=2, num_kv_heads=2, head_dim=8, batch_size=2, num_blocks=8, block_size=4,
                   dtype=torch.float32, device="cpu", max_seq_len=32)
    options.update(overrides)
    return PagedCache(**options)


def test_block_manager_hands_out_blocks_in_free_list_order_and_shuffles_with_a_seed():
    plain = BlockManager(6, 4)
    plain.reserve({0: 5, 1: 1})
    assert plain.tables == {0: [0, 1], 1: [2]} and plain.num_free == 3
    assert plain.slot(0, 4) == 1 * 4 + 0 and plain.slot(0, 3) == 3
    shuffled, again = BlockManager(6, 4, shuffle_seed=3), BlockManager(6, 4, shuffle_seed=3)
    shuffled.reserve({0: 24})
    again.reserve({0: 24})
    assert shuffled.tables[0] == again.tables[0] != list(range(6))
    assert sorted(shuffled.tables[0]) == list(range(6))
    shuffled.free(0)
    assert shuffled.num_free == 6


def test_block_manager_reserves_all_or_nothing():
    manager = BlockManager(3, 4)
    manager.reserve({0: 4})
    with pytest.raises(BlockPoolExhausted, match="needs 3 more blocks of 4 tokens, 2 of 3 are free"):
        manager.reserve({0: 8, 1: 8})
    assert manager.tables == {0: [0]} and manager.num_free == 2
    with pytest.raises(ValueError, match="num_blocks must be positive"):
        BlockManager(0, 4)


def test_context_packs_real_tokens_of_a_left_padded_prefill_then_decodes():
    manager = BlockManager(8, 4, shuffle_seed=1)
    cached = [0, 0]
    valid = [[True] * 6, [False, False, False, True, True, True]]
    ctx = build_context(manager, cached, valid, torch.device("cpu"))
    assert ctx.q_seq_len.tolist() == [6, 3] and ctx.kv_seq_len.tolist() == [6, 3]
    assert ctx.q_start_loc.tolist() == [0, 6] and ctx.max_q_seq_len == 6 and ctx.max_kv_seq_len == 6
    assert ctx.token_index.tolist() == [0, 1, 2, 3, 4, 5, 9, 10, 11]  # the pads (6, 7, 8) are left out
    expected = [manager.slot(0, p) for p in range(6)] + [manager.slot(1, p) for p in range(3)]
    assert ctx.kv_indices.tolist() == expected
    assert not ctx.is_decoding and not ctx.has_past and cached == [6, 3]
    table = ctx.block_table.tolist()
    assert table[0] == manager.tables[0] and table[1][:1] == manager.tables[1]
    step = build_context(manager, cached, [[True], [True]], torch.device("cpu"))
    assert step.is_decoding and step.token_index is None and step.kv_seq_len.tolist() == [7, 4]
    assert step.kv_indices.tolist() == [manager.slot(0, 6), manager.slot(1, 3)]


def test_paged_cache_reports_the_padded_length_and_refuses_to_outgrow_max_seq_len():
    cache = _cache()
    assert cache.key_pools[0].shape == (8, 4, 2, 8) and len(cache.value_pools) == 2
    cache.begin_forward()
    ctx = cache.prepare_step(5, torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]))
    # while the forward runs, transformers sees the sizes before its step (a second mask kind asks again)
    assert cache.get_seq_length() == 0 and cache.get_mask_sizes(5) == (5, 0) and cache.get_query_offset() == 0
    cache.end_forward(check=False)
    assert cache.get_seq_length() == 5 and cache.get_mask_sizes(1) == (6, 0)
    assert ctx.kv_seq_len.tolist() == [5, 3] and cache.cached == [5, 3]
    long = _cache(max_seq_len=6)
    long.prepare_step(5)
    with pytest.raises(ValueError, match="7 tokens exceed the cache's max_seq_len 6"):
        long.prepare_step(2)
    with pytest.raises(ValueError, match=r"token mask of shape \(1, 5\), expected \(2, 5\)"):
        _cache().prepare_step(5, torch.ones(1, 5))
    keys, values = torch.zeros(1, 2, 3, 8), torch.ones(1, 2, 3, 8)
    assert cache.update(keys, values, 1) == (keys, values)  # a stock module's update: the dlinfer attention writes
    assert cache.updated == {1} and cache.last_updated == 1
    with pytest.raises(ValueError, match=r"layer\(s\) \[1\] called cache.update\(\) but not .* attention interface"):
        cache.end_forward()


def test_int8_cache_has_scale_and_zero_pools():
    cache = _cache(kv_quant_bits=8)
    keys, values, quant = cache.layer_pools(1)
    assert keys.dtype == values.dtype == torch.int8
    assert quant is not None and [t.shape for t in quant] == [(8, 4, 2)] * 4
    assert all(t.dtype == torch.float32 for t in quant)
    with pytest.raises(ValueError, match="kv_quant_bits must be 0 or 8"):
        _cache(kv_quant_bits=4)
