"""Conformance cases of the llm family: fused attention (dense, varlen, paged), RMS norm, rotary embedding, SwiGLU,
KV-cache writes and MoE routing.

Sequence lengths, block tables and cache slots are parameters; the callables below turn them into the index
tensors the ``diopi::`` operators take (``cu_seqlens``, ``block_tables``, ``slot_mapping``) and make the call,
which is recorded as the case. Backward functions are recorded from their forward configs.
"""

from __future__ import annotations

import itertools

import torch

from diopi.conformance.spec import Config, Input, Values

HERE = "diopi.conformance.configs.llm"
NO_HALF = (torch.float32, torch.bfloat16, torch.float64)
UNIT = Values("uniform", -1.0, 1.0)


def _cumulative(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqlens_q: list[int],
                           seqlens_k: list[int], causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Varlen attention over sequences of the given lengths packed along dimension 0 (``scale`` 0: 1/sqrt(D))."""
    softmax_scale = scale or q.shape[-1] ** -0.5
    return torch.ops.diopi.flash_attention_varlen(q, k, v, _cumulative(seqlens_q), _cumulative(seqlens_k),
                                                  max(seqlens_q, default=0), max(seqlens_k, default=0),
                                                  softmax_scale, causal)


def paged_attention_decode(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           context_lens: list[int]) -> torch.Tensor:
    """One decode step; sequence b's blocks are taken from the cache back to front, so the block table really
    indirects."""
    num_blocks, block_size = key_cache.shape[:2]
    per_seq = max((-(-n // block_size) for n in context_lens), default=0)
    order = torch.arange(num_blocks - 1, -1, -1, dtype=torch.int32)
    tables = torch.stack([order[(b * per_seq + torch.arange(per_seq)) % num_blocks] for b in range(len(context_lens))])
    lens = torch.tensor(context_lens, dtype=torch.int32)
    return torch.ops.diopi.paged_attention_decode(q, key_cache, value_cache, tables, lens, q.shape[-1] ** -0.5)


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slots: list[int]) -> None:
    """Write the tokens into the given cache slots (-1: a padding token, skipped)."""
    torch.ops.diopi.reshape_and_cache(key, value, key_cache, value_cache, torch.tensor(slots, dtype=torch.int64))


def _varlen(shapes: list, seqlens_q: list[int], seqlens_k: list[int], note: str = "", dtypes: tuple = NO_HALF,
            causal: tuple = (False, True)) -> Config:
    return Config("diopiFlashAttentionVarlen", call=f"{HERE}.flash_attention_varlen",
                  inputs={"q": Input(), "k": Input(), "v": Input()}, shapes=shapes, dtypes=dtypes,
                  params={"seqlens_q": [seqlens_q], "seqlens_k": [seqlens_k], "causal": list(causal),
                          "scale": [0.0, 0.5]},
                  note=note)


CONFIGS: list[Config] = [
    Config("diopiScaledDotProductAttention", op="_scaled_dot_product_flash_attention_for_cpu.default",
           inputs={"query": Input(), "key": Input(), "value": Input()},
           shapes=[((1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)), ((2, 4, 7, 16), (2, 4, 9, 16), (2, 4, 9, 16)),
                   ((2, 8, 64, 32), (2, 8, 64, 32), (2, 8, 64, 32))],
           dtypes=NO_HALF, params={"dropout_p": [0.0], "is_causal": [False, True], "scale": [None, 0.25]}),
    Config("diopiScaledDotProductAttentionBackward", from_forward="diopiScaledDotProductAttention"),
    Config("diopiFusedRMSNorm", op="diopi::rms_norm.default", inputs={"input": Input(), "weight": Input()},
           shapes=[((4, 8), (8,)), ((2, 3, 16), (16,)), ((0, 8), (8,)), ((5,), (5,)), ((64, 256), (256,))],
           params={"eps": [1e-6, 1e-2]}),
    Config("diopiFusedRMSNormBackward", from_forward="diopiFusedRMSNorm"),
    Config("diopiAddRMSNorm", op="diopi::add_rms_norm.default",
           inputs={"input": Input(), "residual": Input(), "weight": Input()},
           shapes=[((4, 8), (4, 8), (8,)), ((2, 3, 16), (2, 3, 16), (16,)), ((0, 8), (0, 8), (8,)),
                   ((64, 256), (64, 256), (256,))],
           params={"eps": [1e-6]}),
    Config("diopiRotaryEmbedding", op="diopi::rotary_embedding.default",
           inputs={"input": Input(), "cos": Input(values=UNIT, grad=False), "sin": Input(values=UNIT, grad=False)},
           shapes=[((2, 5, 3, 8), (5, 1, 4), (5, 1, 4)), ((7, 4, 16), (7, 1, 8), (7, 1, 8)),
                   ((1, 64, 8, 64), (64, 1, 32), (64, 1, 32)), ((6,), (3,), (3,)), ((0, 2, 4), (0, 1, 2), (0, 1, 2))],
           params={"interleaved": [False, True]},
           note="[batch, seq, heads, head_dim] with cos/sin per position; half-split (NeoX) and interleaved (GPT-J)"),
    Config("diopiRotaryEmbeddingBackward", from_forward="diopiRotaryEmbedding"),
    Config("diopiSiluAndMul", op="diopi::silu_and_mul.default", inputs={"input": Input(values=Values("normal", -6, 6))},
           shapes=[((4, 16),), ((2, 3, 8),), ((0, 6),), ((2,),), ((64, 512),)]),
    Config("diopiSiluAndMulBackward", from_forward="diopiSiluAndMul"),
    _varlen([((10, 2, 8), (10, 2, 8), (10, 2, 8))], [3, 5, 2], [3, 5, 2], "self-attention, three sequences"),
    _varlen([((6, 4, 16), (13, 2, 16), (13, 2, 16))], [1, 4, 1], [5, 4, 4],
            "cross lengths (prefix cache) with grouped-query attention (4 query heads per 2 kv heads)"),
    _varlen([((7, 4, 8), (4, 1, 8), (4, 1, 8))], [7], [4], "more queries than keys: causal rows without a key",
            causal=(True,)),
    _varlen([((64, 4, 32), (64, 4, 32), (64, 4, 32))], [16, 48], [16, 48], "larger"),
    _varlen([((5, 2, 8), (5, 2, 8), (5, 2, 8))], [0, 5, 0], [0, 5, 0], "empty sequences in the batch",
            dtypes=(torch.float32,)),
    Config("diopiFlashAttentionVarlenBackward", from_forward="diopiFlashAttentionVarlen"),
    Config("diopiPagedAttentionDecode", call=f"{HERE}.paged_attention_decode",
           inputs={"q": Input(), "key_cache": Input(), "value_cache": Input()},
           shapes=[((3, 4, 8), (8, 4, 2, 8), (8, 4, 2, 8))], dtypes=NO_HALF,
           params={"context_lens": [[5, 1, 8], [0, 3, 4]]},
           note="block size 4; grouped-query attention (4 query heads on 2 kv heads); an empty context"),
    Config("diopiPagedAttentionDecode", call=f"{HERE}.paged_attention_decode",
           inputs={"q": Input(), "key_cache": Input(), "value_cache": Input()},
           shapes=[((2, 2, 16), (6, 8, 2, 16), (6, 8, 2, 16))], dtypes=NO_HALF,
           params={"context_lens": [[9, 16], [1, 0]]}, note="block size 8"),
    Config("diopiPagedAttentionDecode", call=f"{HERE}.paged_attention_decode",
           inputs={"q": Input(), "key_cache": Input(), "value_cache": Input()},
           shapes=[((4, 8, 32), (32, 16, 8, 32), (32, 16, 8, 32))], dtypes=NO_HALF,
           params={"context_lens": [[100, 17, 64, 1]]}),
    Config("diopiReshapeAndCache", call=f"{HERE}.reshape_and_cache",
           inputs={"key": Input(), "value": Input(), "key_cache": Input(), "value_cache": Input()},
           shapes=[((3, 2, 8), (3, 2, 8), (4, 4, 2, 8), (4, 4, 2, 8)), ((3, 1, 4), (3, 1, 4), (2, 8, 1, 4),
                                                                        (2, 8, 1, 4))],
           params={"slots": [[0, 5, 15], [7, -1, 2]]}, note="slot = block * block_size + offset; -1 is padding"),
    Config("diopiReshapeAndCache", call=f"{HERE}.reshape_and_cache",
           inputs={"key": Input(), "value": Input(), "key_cache": Input(), "value_cache": Input()},
           shapes=[((16, 4, 32), (16, 4, 32), (8, 16, 4, 32), (8, 16, 4, 32))],
           params={"slots": [list(range(40, 56)), list(range(127, 111, -1))]}),
    Config("diopiMoeGatingTopkSoftmax", op="diopi::moe_gating_topk_softmax.default",
           inputs={"gating_logits": Input(values=Values("normal", -4, 4))},
           shapes=[((5, 8),), ((1, 4),), ((0, 8),), ((64, 64),)], params={"k": [1, 4], "renormalize": [False, True]},
           layouts=("contiguous", "noncontiguous"),
           note="distinct logits almost surely: no ties in the top-k order"),
]
