"""Conformance cases of the sort family: sort, top-k and unique."""

from __future__ import annotations

import torch

from diopi.conformance.spec import Config, Input, Values

FLOAT3 = (torch.float32, torch.float16, torch.bfloat16)
F32_I64 = (torch.float32, torch.int64)
#: Few distinct values, so that unique finds repeats.
REPEATS = Values("integer", -4, 4)

SHAPES = [((),), ((0, 3),), ((4, 5, 6),), ((8, 700),)]

CONFIGS: list[Config] = [
    Config("diopiSort", op="sort.default", inputs={"self": Input()}, shapes=list(SHAPES),
           dtypes=(torch.float32, torch.float16), params={"dim": [-1], "descending": [False, True]},
           note="random floats: no ties, so the unstable order is defined"),
    Config("diopiSort", op="sort.stable", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((8, 700),)],
           dtypes=(torch.float32,), params={"stable": [True], "dim": [-1], "descending": [False, True]},
           values=Values("special"), note="NaN sorts last, -0.0 and 0.0 tie"),
    Config("diopiSort", op="sort.stable", inputs={"self": Input()}, shapes=list(SHAPES),
           dtypes=(torch.bfloat16, torch.int64, torch.float64), params={"stable": [True], "dim": [0],
                                                                        "descending": [False, True]},
           values=REPEATS, note="repeated values: stable order"),
    Config("diopiTopk", op="topk.default", inputs={"self": Input()}, shapes=[((6,),), ((4, 5, 6),), ((8, 700),)],
           dtypes=FLOAT3, params={"k": [1, 3], "dim": [-1], "largest": [True, False]}),
    Config("diopiTopk", op="topk.default", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((0, 3),)],
           dtypes=(torch.float32, torch.int64), params={"k": [0, 2], "dim": [1]},
           values=Values("integer", -1000, 1000), note="k = 0 and an empty input"),
    Config("diopiUnique", op="_unique2.default", inputs={"self": Input()}, shapes=list(SHAPES),
           dtypes=F32_I64 + (torch.bfloat16, torch.bool), values=REPEATS,
           params={"sorted": [True], "return_inverse": [False, True], "return_counts": [True]}),
    Config("diopiUnique", op="_unique.default", inputs={"self": Input()}, shapes=[((4, 5, 6),)], dtypes=F32_I64,
           values=REPEATS, params={"sorted": [True], "return_inverse": [True]}),
    Config("diopiUniqueConsecutive", op="unique_consecutive.default", inputs={"self": Input()},
           shapes=list(SHAPES), dtypes=F32_I64 + (torch.bfloat16,), values=Values("integer", 0, 2),
           params={"return_inverse": [True], "return_counts": [False, True]}),
    Config("diopiUniqueConsecutive", op="unique_consecutive.default", inputs={"self": Input()},
           shapes=[((6, 4),), ((20, 3),)], dtypes=F32_I64, values=Values("integer", 0, 2),
           params={"return_inverse": [True], "return_counts": [True], "dim": [0]}),
    Config("diopiUniqueDim", op="unique_dim.default", inputs={"self": Input()},
           shapes=[((6, 2),), ((20, 3),), ((2, 9, 2),), ((0, 3),)], dtypes=F32_I64 + (torch.bfloat16,),
           values=Values("integer", 0, 2), params={"dim": [0], "return_inverse": [True], "return_counts": [True]}),
    Config("diopiUniqueDim", op="unique_dim.default", inputs={"self": Input()}, shapes=[((2, 9, 2),)],
           dtypes=F32_I64, values=Values("integer", 0, 2), params={"dim": [1, -1], "return_inverse": [False]}),
]
