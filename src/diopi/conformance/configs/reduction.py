"""Conformance cases of the reduction family: full and per-dim reductions, statistics and scans."""

from __future__ import annotations

import torch

from diopi.conformance.spec import BOOL, Config, Input, Values

FLOAT3 = (torch.float32, torch.float16, torch.bfloat16)
F32_64 = (torch.float32, torch.float64)
#: Dtypes of reductions returning indices (float16 rather than bfloat16: fewer ties).
INDEXED = (torch.float32, torch.float16, torch.int64)

#: Whole-tensor reductions: 0-dim, empty, "large".
FULL_SHAPES = [((),), ((0, 3),), ((32, 48),)]
#: Reductions along dims of a 3-D tensor: empty in a kept dim, small, long last dim.
DIM_SHAPES = [((0, 4, 3),), ((4, 5, 6),), ((2, 3, 700),)]
#: As DIM_SHAPES, without the empty one (max, min, median, ... cannot reduce zero elements).
NONEMPTY_DIM_SHAPES = [((1, 1, 1),), ((4, 5, 6),), ((2, 3, 700),)]
#: Variance and standard deviation: at least two elements per reduction, so that a correction of 1 is defined.
MANY_FULL_SHAPES = [((7,),), ((32, 48),)]
MANY_DIM_SHAPES = [((2, 3, 2),), ((4, 5, 6),), ((2, 3, 700),)]
NORMAL = Values()
SPECIAL = Values("special")


def reduction(function: str, full_op: str | None, dim_op: str | None, *, dim: str = "dim",
              dims: tuple = ([-1], [0, 2]), values: Values = NORMAL, dtypes: tuple = FLOAT3,
              nonempty: bool = False, keepdim: bool = True, params: dict | None = None,
              full_shapes: list | None = None, dim_shapes: list | None = None, note: str = "") -> list[Config]:
    """Whole-tensor cases of ``full_op`` and per-dim cases of ``dim_op``: ``dims[0]`` without keepdim in every
    dtype, ``dims[1]`` with keepdim in the first dtype (scans: ``keepdim=False``, no such argument). ``nonempty``
    leaves out empty inputs; ``full_shapes``/``dim_shapes`` replace the default shapes."""
    extra = dict(params or {})
    configs = []
    if full_op:
        shapes = full_shapes or (FULL_SHAPES[::2] if nonempty else FULL_SHAPES)
        configs.append(Config(function, op=full_op, inputs={"self": Input()}, shapes=list(shapes),
                              dtypes=dtypes[:2], values=values, params=dict(extra), note=note))
    if dim_op:
        shapes = dim_shapes or (NONEMPTY_DIM_SHAPES if nonempty else DIM_SHAPES)
        first = {dim: [dims[0]], **({"keepdim": [False]} if keepdim else {}), **extra}
        configs.append(Config(function, op=dim_op, inputs={"self": Input()}, shapes=list(shapes), dtypes=dtypes,
                              values=values, params=first, note=note))
        configs.append(Config(function, op=dim_op, inputs={"self": Input()}, shapes=list(shapes),
                              dtypes=dtypes[:1], values=values,
                              params={dim: [dims[1]], **({"keepdim": [True]} if keepdim else {}), **extra}, note=note))
    return configs


POSITIVE_NEAR_1 = Values("uniform", 0.8, 1.25)

CONFIGS: list[Config] = [
    *reduction("diopiSum", "sum.default", "sum.dim_IntList", dtypes=FLOAT3 + (torch.int64,)),
    Config("diopiTensorStats", op="diopi::tensor_stats.default", inputs={"tensors": Input(list_of=3)},
           shapes=[([(4, 5), (3,), (0,)],), ([(), (32, 48), (2, 3, 4)],)], dtypes=(torch.float32,),
           params={"dtype": [torch.float64]}, layouts=("contiguous", "noncontiguous")),
    Config("diopiTensorStats", op="diopi::tensor_stats.default",
           inputs={"tensors": Input(list_of=2, values=SPECIAL)}, shapes=[([(4, 5), (16,)],)],
           dtypes=(torch.float32, torch.bfloat16), params={"dtype": [torch.float32]},
           note="NaN and infinities are left out of min, max, sum and norm and counted apart"),
    *reduction("diopiNanSum", "nansum.default", "nansum.default", values=Values("special"),
               dtypes=FLOAT3 + (torch.float64,)),
    *reduction("diopiMean", "mean.default", "mean.dim", dtypes=FLOAT3 + (torch.float64,)),
    *reduction("diopiProd", "prod.default", "prod.dim_int", dims=(-1, 1), values=POSITIVE_NEAR_1,
               dtypes=(torch.float32, torch.float64, torch.int64),
               note="values near 1 keep long products finite"),
    *reduction("diopiMax", "max.default", "max.dim", dims=(-1, 1), nonempty=True, dtypes=INDEXED),
    *reduction("diopiMax", None, "amax.default", values=Values("special"), nonempty=True, dtypes=FLOAT3),
    *reduction("diopiMin", "min.default", "min.dim", dims=(-1, 1), nonempty=True, dtypes=INDEXED),
    *reduction("diopiMin", None, "amin.default", values=Values("special"), nonempty=True, dtypes=FLOAT3),
    *reduction("diopiAminmax", "aminmax.default", "aminmax.default", dims=(-1, 1), nonempty=True,
               dtypes=FLOAT3 + (torch.int64,)),
    *reduction("diopiArgmax", "argmax.default", "argmax.default", dims=(-1, 1), nonempty=True, dtypes=INDEXED),
    *reduction("diopiArgmin", "argmin.default", "argmin.default", dims=(-1, 1), nonempty=True, dtypes=INDEXED),
    *reduction("diopiAny", "any.default", "any.dims", values=Values("integer", 0, 2),
               dtypes=BOOL + (torch.float32, torch.int64)),
    *reduction("diopiAll", "all.default", "all.dims", values=Values("integer", 0, 6),
               dtypes=BOOL + (torch.float32, torch.int64), note="mostly non-zero values, so that all() varies"),
    *reduction("diopiCountNonzero", "count_nonzero.default", "count_nonzero.dim_IntList",
               values=Values("integer", -1, 2), keepdim=False,
               dtypes=(torch.float32, torch.int64, torch.bool)),
    *reduction("diopiNorm", "linalg_vector_norm.default", "linalg_vector_norm.default",
               params={"ord": [2, 1]}),
    Config("diopiNorm", op="linalg_vector_norm.default", inputs={"self": Input()},
           shapes=[((4, 5, 6),), ((32, 48),)], dtypes=FLOAT3, params={"ord": [float("inf"), 0, 3]}),
    *reduction("diopiNorm", None, "norm.ScalarOpt_dim", params={"p": [2]}),
    *reduction("diopiVar", "var.correction", "var.correction", params={"correction": [1]},
               full_shapes=MANY_FULL_SHAPES, dim_shapes=MANY_DIM_SHAPES,
               dtypes=FLOAT3 + (torch.float64,)),
    Config("diopiVar", op="var_mean.correction", inputs={"self": Input()}, shapes=list(MANY_DIM_SHAPES),
           dtypes=FLOAT3, params={"dim": [[-1]], "correction": [0, 1], "keepdim": [True]}),
    *reduction("diopiStd", "std.correction", "std.correction", params={"correction": [1]},
               full_shapes=MANY_FULL_SHAPES, dim_shapes=MANY_DIM_SHAPES,
               dtypes=FLOAT3 + (torch.float64,)),
    Config("diopiStd", op="std_mean.correction", inputs={"self": Input()}, shapes=list(MANY_DIM_SHAPES),
           dtypes=FLOAT3, params={"dim": [[-1]], "correction": [0, 1], "keepdim": [False]}),
    *reduction("diopiMedian", "median.default", "median.dim", dims=(-1, 1), nonempty=True, dtypes=INDEXED),
    *reduction("diopiNanMedian", "nanmedian.default", "nanmedian.dim", dims=(-1, 1), nonempty=True,
               values=Values("special"), dtypes=(torch.float32, torch.float16, torch.float64)),
    *reduction("diopiMode", None, "mode.default", dims=(-1, 1), nonempty=True, values=Values("integer", -3, 4),
               dtypes=INDEXED + (torch.int32,),
               note="few distinct values so that modes repeat; ties are broken as the reference does"),
    *reduction("diopiKthvalue", None, "kthvalue.default", dims=(-1, 0), nonempty=True, dtypes=INDEXED,
               params={"k": [1]}),
    Config("diopiKthvalue", op="kthvalue.default", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((2, 3, 700),)],
           dtypes=INDEXED, params={"k": [3], "dim": [-1, 1]}, layouts=("contiguous", "noncontiguous")),
    Config("diopiTrace", op="trace.default", inputs={"self": Input()},
           shapes=[((0, 0),), ((1, 1),), ((4, 4),), ((5, 3),), ((64, 64),)], dtypes=FLOAT3 + (torch.int64,)),
    Config("diopiHistc", op="histc.default", inputs={"self": Input()}, shapes=[((0,),), ((50,),), ((32, 48),)],
           dtypes=F32_64 + (torch.float16,), values=Values("uniform", -2, 2),
           params={"bins": [10, 3], "min": [0, -1], "max": [0, 1]},
           note="min = max = 0 takes the data's range"),
    Config("diopiBincount", op="bincount.default",
           inputs={"self": Input(torch.int64, Values("integer", 0, 20)), "weights": Input()},
           shapes=[((0,), (0,)), ((30,), (30,)), ((2000,), (2000,))], dtypes=F32_64,
           params={"weights=None": [True, False], "minlength": [0, 25]}),
    *reduction("diopiCumsum", None, "cumsum.default", dims=(-1, 0), keepdim=False, dtypes=FLOAT3 + (torch.int64,)),
    Config("diopiCumsum", op="cumsum_.default", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((32, 48),)],
           dtypes=(torch.float32,), params={"dim": [1]}),
    Config("diopiCumsum", op="cumsum.default", inputs={"self": Input()}, shapes=[((),)], dtypes=FLOAT3,
           params={"dim": [0]}),
    *reduction("diopiCumprod", None, "cumprod.default", dims=(-1, 0), keepdim=False, values=POSITIVE_NEAR_1,
               dtypes=FLOAT3 + (torch.int64,)),
    Config("diopiCumprod", op="cumprod_.default", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((32, 48),)],
           dtypes=(torch.float32,), values=POSITIVE_NEAR_1, params={"dim": [1]}),
    *reduction("diopiCummax", None, "cummax.default", dims=(-1, 0), keepdim=False, values=SPECIAL, dtypes=FLOAT3),
    Config("diopiCummax", op="cummax.default", inputs={"self": Input()}, shapes=[((),), ((4, 5, 6),)],
           dtypes=(torch.int64, torch.int32), params={"dim": [0]}),
    *reduction("diopiCummin", None, "cummin.default", dims=(-1, 0), keepdim=False, values=SPECIAL, dtypes=FLOAT3),
    Config("diopiCummin", op="cummin.default", inputs={"self": Input()}, shapes=[((),), ((4, 5, 6),)],
           dtypes=(torch.int64, torch.int32), params={"dim": [0]}),
    *reduction("diopiLogCumSumExp", None, "logcumsumexp.default", dims=(-1, 0), keepdim=False,
               values=Values("normal", -20, 20),
               dtypes=FLOAT3 + (torch.float64,)),
    *reduction("diopiLogSumExp", None, "logsumexp.default", values=Values("normal", -20, 20),
               dtypes=FLOAT3 + (torch.float64,)),
]
