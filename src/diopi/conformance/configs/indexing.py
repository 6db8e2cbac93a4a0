"""Conformance cases of the indexing family: where/masking, index and gather/scatter ops, embedding, searching."""

from __future__ import annotations

import torch

from diopi.conformance.spec import BOOL, Config, Input, Values

FLOAT3 = (torch.float32, torch.float16, torch.bfloat16)
F32_BF16 = (torch.float32, torch.bfloat16)
DATA = FLOAT3 + (torch.int64,)

MASK = Input(torch.bool, Values("bool"), grad=False)


def index_of(dim: int) -> Input:
    """An int64 index into dimension ``dim`` of the first input."""
    return Input(torch.int64, Values("index", high=f"dim:{dim}"), grad=False)


def searchsorted_on_sorted(sorted_sequence: torch.Tensor, input: torch.Tensor, **kwargs: object) -> torch.Tensor:  # noqa: A002
    """``torch.searchsorted`` on ``sorted_sequence`` sorted along its last dim (random inputs are not)."""
    return torch.searchsorted(sorted_sequence.sort(-1).values, input, **kwargs)


def bucketize_on_sorted(input: torch.Tensor, boundaries: torch.Tensor, **kwargs: object) -> torch.Tensor:  # noqa: A002
    """``torch.bucketize`` with ``boundaries`` sorted (random inputs are not)."""
    return torch.bucketize(input, boundaries.sort().values, **kwargs)


_HERE = __name__

CONFIGS: list[Config] = [
    Config("diopiWhere", op="where.self", inputs={"condition": MASK, "self": Input(), "other": Input()},
           shapes=[((0, 3), (0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6), (4, 5, 6)), ((4, 5, 6), (5, 1), (6,)),
                   ((32, 48), (32, 48), ())], dtypes=DATA + BOOL),
    Config("diopiMaskedFill", op="masked_fill.Scalar", inputs={"self": Input(), "mask": MASK},
           shapes=[((0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6)), ((4, 5, 6), (5, 1)), ((32, 48), (48,))],
           dtypes=DATA, params={"value": [-1.5]}),
    Config("diopiMaskedFill", op="masked_fill.Scalar", inputs={"self": Input(), "mask": MASK},
           shapes=[((4, 5),)*2], dtypes=FLOAT3, params={"value": [float("-inf")]}, note="attention masks' -inf"),
    Config("diopiMaskedFill", op="masked_fill.Tensor", inputs={"self": Input(), "mask": MASK, "value": Input()},
           shapes=[((4, 5, 6), (4, 5, 6), ()), ((32, 48), (48,), ())], dtypes=F32_BF16),
    Config("diopiMaskedFill", op="masked_fill_.Scalar", inputs={"self": Input(), "mask": MASK},
           shapes=[((5, 6), (5, 6)), ((16, 40), (40,))], dtypes=(torch.float32,), params={"value": [2.0]}),
    # embedding
    Config("diopiEmbedding", op="embedding.default", inputs={"weight": Input(), "indices": index_of(0)},
           shapes=[((10, 4), (0,)), ((10, 4), (6,)), ((10, 4), (3, 5)), ((1000, 64), (8, 32))], dtypes=FLOAT3,
           params={"padding_idx": [-1, 0]}),
    Config("diopiEmbedding", op="embedding.default", inputs={"weight": Input(), "indices": index_of(0)},
           shapes=[((10, 4), (3, 5))], dtypes=(torch.float32,), params={"scale_grad_by_freq": [True]},
           note="its backward scales the gradient by each index's frequency"),
    Config("diopiEmbeddingBackward", from_forward="diopiEmbedding"),
    Config("diopiEmbeddingRenorm", op="embedding_renorm_.default", inputs={"self": Input(), "indices": index_of(0)},
           shapes=[((10, 4), (6,)), ((10, 4), (0,)), ((200, 32), (64,))], dtypes=(torch.float32, torch.float64),
           params={"max_norm": [1.0], "norm_type": [2.0, 1.0]}),
    Config("diopiEmbeddingBag", call="torch.nn.functional.embedding_bag",
           inputs={"weight": Input(), "input": index_of(0)},
           shapes=[((10, 4), (3, 5)), ((10, 4), (1, 1)), ((500, 32), (16, 20))], dtypes=F32_BF16,
           params={"mode": ["sum", "mean", "max"], "padding_idx": [None, 0]}, layouts=("contiguous", "offset"),
           note="2-D input: one bag per row"),
    Config("diopiEmbeddingBagBackward", from_forward="diopiEmbeddingBag"),
    # index ops
    Config("diopiIndexSelect", op="index_select.default", inputs={"self": Input(), "index": index_of(0)},
           shapes=[((0, 3), (0,)), ((4, 5, 6), (7,)), ((64, 48), (32,))], dtypes=DATA, params={"dim": [0]}),
    Config("diopiIndexSelect", op="index_select.default", inputs={"self": Input(), "index": index_of(-1)},
           shapes=[((4, 5, 6), (3,)), ((6,), ())], dtypes=F32_BF16, params={"dim": [-1]}),
    Config("diopiIndex", op="index.Tensor", inputs={"self": Input(), "indices": Input(torch.int64,
           Values("index", high="dim:0"), grad=False, list_of=1)},
           shapes=[((4, 5, 6), (7,)), ((4, 5, 6), (2, 3)), ((64, 48), (100,)), ((0, 3), (0,))], dtypes=DATA),
    Config("diopiIndex", op="index.Tensor", inputs={"self": Input(), "indices": Input(torch.int64,
           Values("index", high="dim:0"), grad=False, list_of=2)},
           shapes=[((4, 4, 6), (5,)), ((8, 8), [(3, 1), (4,)])], dtypes=F32_BF16,
           note="two index tensors, broadcast against each other"),
    Config("diopiIndex", op="index.Tensor", inputs={"self": Input(), "indices": Input(torch.bool, Values("bool"),
           grad=False, list_of=1)}, shapes=[((4, 5, 6), (4, 5)), ((32, 48), (32, 48))], dtypes=F32_BF16,
           note="a boolean mask index"),
    Config("diopiIndexPut", op="index_put.default", inputs={"self": Input(), "indices": Input(torch.int64,
           Values("index", high="dim:0"), grad=False, list_of=1), "values": Input()},
           shapes=[((4, 5, 6), (7,), (7, 5, 6)), ((4, 5, 6), (3,), (6,)), ((64, 48), (100,), (100, 48)),
                   ((0, 3), (0,), ())], dtypes=DATA, params={"accumulate": [True]}),
    Config("diopiIndexPut", op="index_put.default", inputs={"self": Input(), "indices": Input(torch.int64,
           Values("index", high="dim:0"), grad=False, list_of=1), "values": Input()},
           shapes=[((4, 5, 6), (1,), (1, 5, 6)), ((64, 48), (1,), (48,))], dtypes=DATA,
           params={"accumulate": [False]}, note="one index: writes to a repeated index have no defined winner"),
    Config("diopiIndexPut", op="index_put_.default", inputs={"self": Input(), "indices": Input(torch.bool,
           Values("bool"), grad=False, list_of=1), "values": Input()},
           shapes=[((4, 5), (4, 5), ()), ((16, 40), (16,), (40,))], dtypes=(torch.float32,),
           params={"accumulate": [False]}, note="a boolean mask index"),
    Config("diopiIndexAdd", op="index_add.default", inputs={"self": Input(), "index": index_of(0), "source": Input()},
           shapes=[((4, 5, 6), (7,), (7, 5, 6)), ((64, 48), (100,), (100, 48)), ((5,), (2,), (2,))],
           dtypes=DATA, params={"dim": [0], "alpha": [1, 2]}),
    Config("diopiIndexAdd", op="index_add_.default", inputs={"self": Input(), "index": index_of(-1),
                                                            "source": Input()},
           shapes=[((4, 5, 6), (3,), (4, 5, 3))], dtypes=(torch.float32,), params={"dim": [-1]}),
    Config("diopiIndexFill", op="index_fill.int_Scalar", inputs={"self": Input(), "index": index_of(0)},
           shapes=[((4, 5, 6), (3,)), ((64, 48), (20,)), ((0, 3), (0,))], dtypes=DATA,
           params={"dim": [0], "value": [-2]}),
    Config("diopiIndexFill", op="index_fill_.int_Scalar", inputs={"self": Input(), "index": index_of(1)},
           shapes=[((4, 5, 6), (2,))], dtypes=(torch.float32,), params={"dim": [1], "value": [7.5]}),
    Config("diopiIndexCopy", op="index_copy.default", inputs={"self": Input(), "index": Input(torch.int64,
           Values("integer", 0, 1), grad=False), "source": Input()},
           shapes=[((4, 5, 6), (1,), (1, 5, 6)), ((64, 48), (1,), (1, 48))], dtypes=DATA, params={"dim": [0]},
           note="one index: copies with repeated indices have no defined winner"),
    Config("diopiIndexCopy", op="index_copy_.default", inputs={"self": Input(), "index": Input(torch.int64,
           Values("integer", 2, 3), grad=False), "source": Input()},
           shapes=[((4, 5, 6), (1,), (4, 5, 1))], dtypes=F32_BF16, params={"dim": [-1]}),
    Config("diopiIndexReduce", op="index_reduce.default", inputs={"self": Input(), "index": index_of(0),
                                                                 "source": Input()},
           shapes=[((4, 5, 6), (7,), (7, 5, 6)), ((32, 48), (50,), (50, 48))], dtypes=(torch.float32,),
           values=Values("uniform", 0.5, 1.5),
           params={"dim": [0], "reduce": ["prod", "mean", "amax", "amin"], "include_self": [True, False]}),
    Config("diopiIndexReduce", op="index_reduce_.default", inputs={"self": Input(), "index": index_of(0),
                                                                  "source": Input()},
           shapes=[((5, 6), (3,), (3, 6))], dtypes=(torch.float32,), params={"dim": [0], "reduce": ["amax"]}),
    Config("diopiGather", op="gather.default", inputs={"self": Input(), "index": index_of(1)},
           shapes=[((4, 5, 6), (4, 3, 6)), ((4, 5, 6), (2, 8, 1)), ((64, 48), (64, 10)), ((0, 3), (0, 3))],
           dtypes=DATA, params={"dim": [1]}),
    Config("diopiGather", op="gather.default", inputs={"self": Input(), "index": index_of(0)},
           shapes=[((6,), (10,)), ((), ())], dtypes=F32_BF16, params={"dim": [0]}),
    Config("diopiScatter", op="scatter.src", inputs={"self": Input(), "index": Input(torch.int64,
           Values("integer", 0, 1), grad=False), "src": Input()},
           shapes=[((4, 5, 6), (4, 1, 6), (4, 5, 6)), ((64, 48), (64, 1), (64, 48))], dtypes=DATA,
           params={"dim": [1]}, note="one target per row: scatter with repeated targets has no defined winner"),
    Config("diopiScatter", op="scatter.value", inputs={"self": Input(), "index": index_of(1)},
           shapes=[((4, 5, 6), (4, 3, 6)), ((0, 3), (0, 3))], dtypes=FLOAT3, params={"dim": [1], "value": [2.5]}),
    Config("diopiScatter", op="scatter_add.default", inputs={"self": Input(), "index": index_of(1), "src": Input()},
           shapes=[((4, 5, 6), (4, 8, 6), (4, 8, 6)), ((64, 48), (64, 100), (64, 100)), ((5, 1), (3, 1), (4, 1))],
           dtypes=DATA, params={"dim": [1]}),
    Config("diopiScatter", op="scatter_reduce.two", inputs={"self": Input(), "index": index_of(0), "src": Input()},
           shapes=[((4, 5), (9, 5), (9, 5)), ((64, 48), (100, 48), (100, 48))], dtypes=(torch.float32,),
           values=Values("uniform", 0.5, 1.5),
           params={"dim": [0], "reduce": ["sum", "prod", "mean", "amax", "amin"], "include_self": [True]}),
    Config("diopiScatter", op="scatter_reduce.two", inputs={"self": Input(), "index": index_of(0), "src": Input()},
           shapes=[((4, 5), (9, 5), (9, 5))], dtypes=(torch.bfloat16, torch.float64),
           values=Values("uniform", 0.5, 1.5),
           params={"dim": [0], "reduce": ["mean", "amax"], "include_self": [False]}),
    Config("diopiScatter", op="scatter_add_.default", inputs={"self": Input(), "index": index_of(0),
                                                             "src": Input()},
           shapes=[((5, 6), (9, 6), (9, 6))], dtypes=(torch.float32,), params={"dim": [0]}),
    Config("diopiTake", op="take.default", inputs={"self": Input(), "index": index_of(0)},
           shapes=[((20,), (7,)), ((20,), (3, 4)), ((2000,), (500,)), ((5,), ())], dtypes=DATA),
    Config("diopiTake", op="take.default", inputs={"self": Input(), "index": Input(torch.int64,
           Values("integer", -20, 20), grad=False)}, shapes=[((4, 5), (6,))], dtypes=F32_BF16,
           note="negative indices count from the end"),
    Config("diopiPut", op="put.default", inputs={"self": Input(), "index": index_of(0), "source": Input()},
           shapes=[((20,), (7,), (7,)), ((2000,), (500,), (500,))], dtypes=DATA, params={"accumulate": [True]}),
    Config("diopiPut", op="put_.default", inputs={"self": Input(), "index": Input(torch.int64,
           Values("integer", 0, 1), grad=False), "source": Input()},
           shapes=[((4, 5), (1,), (1,))], dtypes=F32_BF16, params={"accumulate": [False, True]}),
    Config("diopiMaskedSelect", op="masked_select.default", inputs={"self": Input(), "mask": MASK},
           shapes=[((0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6)), ((4, 5, 6), (5, 1)), ((32, 48), (48,))], dtypes=DATA),
    Config("diopiMaskedScatter", op="masked_scatter.default", inputs={"self": Input(), "mask": MASK,
                                                                     "source": Input()},
           shapes=[((0, 3), (0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6), (4, 5, 6)), ((4, 5, 6), (5, 1), (4, 5, 6)),
                   ((32, 48), (48,), (32, 48))], dtypes=DATA),
    Config("diopiMaskedScatter", op="masked_scatter_.default", inputs={"self": Input(), "mask": MASK,
                                                                      "source": Input()},
           shapes=[((5, 6), (5, 6), (40,))], dtypes=(torch.float32,)),
    Config("diopiNonzero", op="nonzero.default", inputs={"self": Input()},
           shapes=[((),), ((0, 3),), ((4, 5, 6),), ((64, 48),)], dtypes=(torch.float32, torch.int64, torch.bool),
           values=Values("integer", -1, 2)),
    Config("diopiSearchsorted", call=f"{_HERE}.searchsorted_on_sorted",
           inputs={"sorted_sequence": Input(), "input": Input()},
           shapes=[((10,), (7,)), ((10,), (3, 4)), ((4, 10), (4, 6)), ((500,), (2000,)), ((10,), (0,))],
           dtypes=(torch.float32, torch.bfloat16, torch.int64), params={"right": [False, True]}),
    Config("diopiSearchsorted", op="searchsorted.Scalar", inputs={"sorted_sequence": Input(values=Values(
           "integer", 0, 1))}, shapes=[((10,),)], dtypes=(torch.float32,), params={"self": [0.0, 0.5]},
           note="a constant (so sorted) sequence and a scalar"),
    Config("diopiBucketize", call=f"{_HERE}.bucketize_on_sorted", inputs={"input": Input(), "boundaries": Input()},
           shapes=[((7,), (10,)), ((3, 4), (10,)), ((2000,), (500,)), ((0,), (10,)), ((), (4,))],
           dtypes=(torch.float32, torch.bfloat16, torch.int64), params={"right": [False, True]}),
]
