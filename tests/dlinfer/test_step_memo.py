"""The per-step memos (dlinfer.reference._memo.StepMemo): hit for the same unwritten tensors, miss after an
in-place write, nothing for inference tensors, and the entry (with its device memory) gone once a key tensor is
freed, so a memo never holds a finished step's tensors."""

from __future__ import annotations

import gc

import torch

from dlinfer.reference._memo import StepMemo


def test_hit_miss_and_release():
    memo = StepMemo()
    key, value = torch.arange(4), torch.zeros(1000)
    memo.put((key,), "x", value)
    assert memo.get((key,), "x") is value
    assert memo.get((key,), "y") is None and memo.get((torch.arange(4),), "x") is None
    key.add_(1)                                  # written since: the entry no longer matches
    assert memo.get((key,), "x") is None
    memo.put((key,), "x", value)
    del key
    gc.collect()
    assert memo._entries == []                   # the freed key took its entry (and the value) with it


def test_inference_tensors_are_not_memoised():
    memo = StepMemo()
    with torch.inference_mode():
        key = torch.arange(4)
        memo.put((key,), None, torch.ones(1))
        assert memo.get((key,), None) is None
