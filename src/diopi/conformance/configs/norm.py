"""Conformance cases of the norm family: batch, layer, group, RMS and weight normalization, synchronized batch norm.

Running variances, inverse standard deviations and element counts are positive (``Values("positive")``); the
synchronized batch norm functions, which PyTorch runs on CUDA only, are judged against the host references of
:mod:`diopi.host_kernels_norm` (a CPU device target reports them as not implemented).
"""

from __future__ import annotations

import torch

from diopi.conformance.spec import FLOAT, Config, Input, Values

HERE = "diopi.conformance.configs.norm"
POSITIVE = Values("positive", 0.5, 2.0)
STAT = Input(grad=False)
VAR = Input(values=POSITIVE, grad=False)
NO_HALF = (torch.float32, torch.bfloat16, torch.float64)
CONTIGUOUS = ("contiguous", "offset")
WEIGHT_NORM_NOTE = ("contiguous v only: PyTorch's CPU kernel silently misreads a strided v (and its backward refuses "
                    "one); dim is the first or the last dimension, as the fused kernel requires")
MUTATES_NOTE = ("running statistics None: the operator updates them in place although its schema does not say so, "
                "which the suite reports as an unexpected mutation")

#: (input, per-channel) shape pairs: 2-D, 3-D, 4-D, 5-D and a larger 4-D.
BN_SHAPES = [((4, 3), (3,)), ((2, 3, 5), (3,)), ((2, 4, 3, 3), (4,)), ((2, 2, 2, 3, 2), (2,)),
             ((8, 16, 8, 8), (16,))]


def group_norm(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, num_groups: int,
               affine: bool) -> torch.Tensor:
    """``F.group_norm`` (with or without the affine parameters): records ``native_group_norm``."""
    if not affine:
        return torch.nn.functional.group_norm(input, num_groups, eps=1e-5)
    return torch.nn.functional.group_norm(input, num_groups, weight, bias, eps=1e-5)


def _per_norm(function: str, op: str, names: tuple[str, ...], shapes: list[tuple[int, ...]], dims: int,
              params: dict) -> list[Config]:
    """One config per input shape, normalized over its last ``dims`` dimensions (weight and bias shaped so)."""
    return [Config(function, op=op, inputs={n: Input() for n in names},
                   shapes=[(shape,) + (shape[-dims:],) * (len(names) - 1)],
                   params={"normalized_shape": [list(shape[-dims:])], **params}) for shape in shapes]


def _bn(op: str, shapes: list, **params: list) -> Config:
    return Config("diopiBatchNorm", op=op,
                  inputs={"input": Input(), "weight": Input(), "bias": Input(), "running_mean": STAT,
                          "running_var": VAR},
                  shapes=[(x, c, c, c, c) for x, c in shapes], dtypes=NO_HALF, params=params,
                  note="float16 has no CPU batch norm kernel", layouts=("contiguous", "noncontiguous"))


def _sync(function: str, op: str, inputs: dict[str, Input], shapes: list, params: dict | None = None,
          note: str = "") -> Config:
    return Config(function, op=op, inputs=inputs, shapes=shapes, dtypes=FLOAT, params=dict(params or {}),
                  note=note or "SyncBatchNorm's kernel: CUDA only in PyTorch; host reference",
                  layouts=("contiguous", "noncontiguous"))


CONFIGS: list[Config] = [
    _bn("native_batch_norm.default", BN_SHAPES, training=[False], momentum=[0.1], eps=[1e-5]),
    _bn("native_batch_norm.default", BN_SHAPES, training=[True], momentum=[0.1], eps=[1e-5],
        **{"running_mean=None": [True], "running_var=None": [True]}),
    _bn("native_batch_norm.default", BN_SHAPES[1:3], training=[True], momentum=[0.5], eps=[1e-3],
        **{"weight=None": [True], "bias=None": [True], "running_mean=None": [True], "running_var=None": [True]}),
    _bn("_native_batch_norm_legit.default", BN_SHAPES[:3], training=[True], momentum=[0.1], eps=[1e-5]),
    Config("diopiBatchNorm", op="_native_batch_norm_legit.no_stats",
           inputs={"input": Input(), "weight": Input(), "bias": Input()},
           shapes=[(x, c, c) for x, c in BN_SHAPES[:3]], dtypes=NO_HALF,
           params={"training": [True], "momentum": [0.1], "eps": [1e-5]}),
    _bn("_native_batch_norm_legit_no_training.default", BN_SHAPES[:3], momentum=[0.1], eps=[1e-5]),
    Config("diopiBatchNormBackward", from_forward="diopiBatchNorm", dtypes=NO_HALF),
    Config("diopiBatchNormUpdateStats", op="batch_norm_update_stats.default",
           inputs={"input": Input(), "running_mean": STAT, "running_var": VAR},
           shapes=[(x, c, c) for x, c in BN_SHAPES], dtypes=NO_HALF,
           params={"momentum": [0.1], "running_mean=None": [True], "running_var=None": [True]}, note=MUTATES_NOTE),
    _sync("diopiBatchNormStats", "batch_norm_stats.default", {"input": Input()},
          [(x,) for x, _ in BN_SHAPES], {"eps": [1e-5, 1e-3]}),
    _sync("diopiBatchNormElemt", "batch_norm_elemt.default",
          {"input": Input(), "weight": Input(), "bias": Input(), "mean": Input(), "invstd": Input(values=POSITIVE)},
          [(x, c, c, c, c) for x, c in BN_SHAPES], {"eps": [1e-5], "weight=None": [False, True]}),
    _sync("diopiBatchNormGatherStatsWithCounts", "batch_norm_gather_stats_with_counts.default",
          {"input": Input(), "mean": Input(), "invstd": Input(values=POSITIVE), "running_mean": STAT,
           "running_var": VAR, "counts": Input(values=Values("positive", 2, 64))},
          [((4, 3), (2, 3), (2, 3), (3,), (3,), (2,)), ((2, 8, 4), (4, 8), (4, 8), (8,), (8,), (4,)),
           ((2, 16, 2, 2), (1, 16), (1, 16), (16,), (16,), (1,))],
          {"momentum": [0.1], "eps": [1e-5], "running_mean=None": [True], "running_var=None": [True]},
          note="SyncBatchNorm's kernel (CUDA only in PyTorch; host reference): world of 1 to 4 ranks; " + MUTATES_NOTE),
    _sync("diopiBatchNormBackwardReduce", "batch_norm_backward_reduce.default",
          {"grad_out": Input(), "input": Input(), "mean": Input(), "invstd": Input(values=POSITIVE),
           "weight": Input()},
          [(x, x, c, c, c) for x, c in BN_SHAPES],
          {"input_g": [True], "weight_g": [True], "bias_g": [True]}),
    _sync("diopiBatchNormBackwardReduce", "batch_norm_backward_reduce.default",
          {"grad_out": Input(), "input": Input(), "mean": Input(), "invstd": Input(values=POSITIVE),
           "weight": Input()},
          [(x, x, c, c, c) for x, c in BN_SHAPES[:3]],
          {"input_g": [True], "weight_g": [False], "bias_g": [False]}),
    _sync("diopiBatchNormBackwardElemt", "batch_norm_backward_elemt.default",
          {"grad_out": Input(), "input": Input(), "mean": Input(), "invstd": Input(values=POSITIVE),
           "weight": Input(), "sum_dy": Input(), "sum_dy_xmu": Input(),
           "count": Input(dtype=torch.int32, values=Values("integer", 2, 20))},
          [(x, x, c, c, c, c, c, (3,)) for x, c in BN_SHAPES], {"weight=None": [False, True]}),
    *_per_norm("diopiLayerNorm", "native_layer_norm.default", ("input", "weight", "bias"),
               [(4, 8), (2, 3, 8), (0, 5), (64, 256)], 1, {"eps": [1e-5]}),
    *_per_norm("diopiLayerNorm", "native_layer_norm.default", ("input", "weight", "bias"),
               [(4, 8), (64, 256)], 1, {"eps": [1e-6], "weight=None": [True], "bias=None": [True]}),
    *_per_norm("diopiLayerNorm", "native_layer_norm.default", ("input", "weight", "bias"),
               [(2, 3, 4), (5, 6, 7)], 2, {"eps": [1e-5]}),
    Config("diopiLayerNormBackward", from_forward="diopiLayerNorm"),
    Config("diopiGroupNorm", call=f"{HERE}.group_norm", inputs={"input": Input(), "weight": Input(), "bias": Input()},
           shapes=[((2, 6, 4), (6,), (6,)), ((2, 4, 3, 3), (4,), (4,)), ((1, 8, 2, 2, 2), (8,), (8,)),
                   ((4, 32, 8, 8), (32,), (32,))],
           params={"num_groups": [2, 1], "affine": [True, False]}),
    Config("diopiGroupNormBackward", from_forward="diopiGroupNorm"),
    *_per_norm("diopiRMSNorm", "rms_norm.default", ("input", "weight"), [(4, 8), (2, 3, 8), (0, 5), (64, 256)], 1,
               {"eps": [1e-6, None], "weight=None": [False, True]}),
    *_per_norm("diopiRMSNorm", "rms_norm.default", ("input", "weight"), [(2, 3, 4)], 2, {"eps": [1e-5]}),
    *_per_norm("diopiRMSNorm", "_fused_rms_norm.default", ("input", "weight"), [(4, 8), (2, 3, 8), (64, 256)], 1,
               {"eps": [1e-5]}),
    Config("diopiRMSNormBackward", op="_fused_rms_norm_backward.default",
           inputs={"grad_out": Input(), "input": Input(), "rstd": Input(values=POSITIVE), "weight": Input()},
           shapes=[((4, 8), (4, 8), (4, 1), (8,)), ((2, 3, 8), (2, 3, 8), (2, 3, 1), (8,)),
                   ((16, 8), (16, 8), (16, 1), (8,))],
           params={"normalized_shape": [[8]], "output_mask": [[True, True], [True, False]]},
           note="no CPU kernel in PyTorch (a CUDA one): host reference; rstd any positive per-row scale"),
    Config("diopiRMSNormBackward", op="_fused_rms_norm_backward.default",
           inputs={"grad_out": Input(), "input": Input(), "rstd": Input(values=POSITIVE), "weight": Input()},
           shapes=[((2, 3, 4), (2, 3, 4), (2, 1, 1), (3, 4))],
           params={"normalized_shape": [[3, 4]], "output_mask": [[True, True], [False, True]]}),
    Config("diopiRMSNormBackward", op="_fused_rms_norm_backward.default",
           inputs={"grad_out": Input(), "input": Input(), "rstd": Input(values=POSITIVE), "weight": Input()},
           shapes=[((64, 256), (64, 256), (64, 1), (256,))],
           params={"normalized_shape": [[256]], "output_mask": [[True, True]]}),
    Config("diopiWeightNorm", op="_weight_norm_interface.default", inputs={"v": Input(), "g": Input()},
           shapes=[((4, 3, 3), (4, 1, 1)), ((6, 5), (6, 1)), ((16, 8, 3, 3), (16, 1, 1, 1))],
           params={"dim": [0]}, layouts=CONTIGUOUS, note=WEIGHT_NORM_NOTE),
    Config("diopiWeightNorm", op="_weight_norm_interface.default", inputs={"v": Input(), "g": Input()},
           shapes=[((6, 5), (1, 5))], params={"dim": [1]}, layouts=CONTIGUOUS, note=WEIGHT_NORM_NOTE),
    Config("diopiWeightNorm", op="_weight_norm_interface.default", inputs={"v": Input(), "g": Input()},
           shapes=[((3, 4, 7), (1, 1, 7))], params={"dim": [2]}, layouts=CONTIGUOUS, note=WEIGHT_NORM_NOTE),
    Config("diopiWeightNormBackward", from_forward="diopiWeightNorm", dtypes=(torch.float32, torch.float64),
           layouts=CONTIGUOUS),
    Config("diopiRenorm", op="renorm.default", inputs={"self": Input()},
           shapes=[((4, 5),), ((3, 4, 5),), ((0, 3),), ((64, 128),)],
           params={"p": [2, 1], "dim": [0, 1], "maxnorm": [1.0]}, inplace="renorm_.default"),
]
