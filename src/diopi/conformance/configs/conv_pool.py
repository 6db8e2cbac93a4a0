"""Conformance cases of the conv_pool family: convolution, padding, im2col and pooling.

Parameters that must agree with the shapes (kernel sizes, strides, groups) are given per config. Backward
functions are recorded from their forward configs; the padding gradients and max unpooling, whose inputs come
from another function (a padding mode, pooling indices), are ``call`` recipes run by the callables below.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diopi.conformance.spec import FLOAT, Config, Input, Values

HERE = "diopi.conformance.configs.conv_pool"
F32_F64 = (torch.float32, torch.float64)
SAMPLES = Input(values=Values("uniform", 0.0, 1.0), grad=False)


def pad_backward(input: torch.Tensor, pad: list[int], mode: str) -> None:
    """Pad ``input`` in ``mode`` (reflect, replicate) and run backward: the padding gradient is recorded."""
    x = input.detach().requires_grad_(True)
    out = F.pad(x, pad, mode=mode)
    grad = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    out.backward(grad)


def max_unpool(input: torch.Tensor, kernel: int, dims: int) -> None:
    """Max-pool ``input`` with indices, then unpool the result back to the input size."""
    if dims == 2:
        pooled, indices = F.max_pool2d(input, kernel, return_indices=True)
        F.max_unpool2d(pooled, indices, kernel, output_size=input.shape[-2:])
    else:
        pooled, indices = F.max_pool3d(input, kernel, return_indices=True)
        F.max_unpool3d(pooled, indices, kernel, output_size=input.shape[-3:])


def _conv(shapes: list, **params: list) -> Config:
    base = {"stride": [[1]], "padding": [[0]], "dilation": [[1]], "transposed": [False], "output_padding": [[0]],
            "groups": [1]}
    base.update(params)
    return Config("diopiConvolution", op="convolution.default",
                  inputs={"input": Input(), "weight": Input(), "bias": Input()}, shapes=shapes, params=base,
                  values=Values("normal", -1, 1), dtypes=(torch.float32, torch.bfloat16, torch.float64),
                  note="no float16: PyTorch's CPU convolution in float16 is a slow reference path")


def _pool(function: str, op: str, shapes: list, dtypes: tuple = FLOAT, note: str = "", **params: list) -> Config:
    return Config(function, op=op, inputs={"self": Input()}, shapes=shapes, dtypes=dtypes, params=params, note=note,
                  layouts=("contiguous", "noncontiguous"))


POOL2D = [((2, 3, 8, 8),), ((3, 7, 9),), ((2, 8, 16, 16),)]
POOL3D = [((1, 2, 6, 6, 6),), ((2, 5, 7, 6),), ((2, 4, 8, 8, 8),)]

CONFIGS: list[Config] = [
    _conv([((2, 4, 9, 9), (6, 4, 3, 3), (6,)), ((0, 4, 5, 5), (2, 4, 3, 3), (2,)),
           ((2, 8, 16, 16), (8, 8, 3, 3), (8,))],
          stride=[[1, 1], [2, 2]], padding=[[0, 0], [1, 1]], dilation=[[1, 1]], output_padding=[[0, 0]]),
    _conv([((1, 4, 8, 8), (4, 2, 3, 3), (4,))], padding=[[1, 1]], dilation=[[1, 1], [2, 2]],
          output_padding=[[0, 0]], stride=[[1, 1]], groups=[2]),
    _conv([((2, 6, 7, 7), (6, 1, 3, 3), (6,))], padding=[[1, 1]], dilation=[[1, 1]], stride=[[1, 1], [2, 2]],
          output_padding=[[0, 0]], groups=[6]),
    _conv([((2, 3, 16), (4, 3, 5), (4,)), ((1, 2, 9), (3, 2, 1), (3,))], stride=[[1], [3]], padding=[[0], [2]]),
    _conv([((1, 2, 5, 6, 6), (3, 2, 3, 3, 3), (3,))], stride=[[1, 1, 1], [2, 1, 2]], padding=[[1, 1, 1]],
          dilation=[[1, 1, 1]], output_padding=[[0, 0, 0]]),
    _conv([((2, 4, 5, 5), (4, 3, 3, 3), (3,))], transposed=[True], stride=[[2, 2]], padding=[[1, 1]],
          dilation=[[1, 1]], output_padding=[[0, 0], [1, 1]]),
    _conv([((2, 4, 5, 5), (4, 3, 3, 3), (3,))], transposed=[True], stride=[[1, 1]], padding=[[0, 0]],
          dilation=[[1, 1]], output_padding=[[0, 0]], **{"bias=None": [True]}),
    Config("diopiConvolutionBackward", from_forward="diopiConvolution"),
    Config("diopiPad", op="constant_pad_nd.default", inputs={"self": Input()},
           shapes=[((3, 4),), ((2, 3, 5),), ((0, 4),), ((2, 4, 16, 16),)],
           params={"pad": [[1, 2], [2, 0, 1, 1], [-1, 1]], "value": [1.5]}),
    Config("diopiPad", op="constant_pad_nd.default", inputs={"self": Input()}, shapes=[((),), ((2, 3),)],
           params={"pad": [[]], "value": [0.0]}, note="no padding at all"),
    _pool("diopiPad", "reflection_pad1d.default", [((2, 3, 8),), ((4, 16, 64),)], padding=[[2, 3]]),
    _pool("diopiPad", "reflection_pad2d.default", [((3, 5, 5),), ((2, 8, 24, 24),)],
          padding=[[1, 2, 3, 0], [2, 2, 2, 2]]),
    _pool("diopiPad", "reflection_pad3d.default", [((1, 2, 4, 5, 6),), ((2, 4, 4, 4),)],
          padding=[[1, 1, 2, 0, 1, 2]]),
    _pool("diopiPad", "replication_pad1d.default", [((3, 1),), ((4, 16, 64),)], padding=[[2, 3]]),
    _pool("diopiPad", "replication_pad2d.default", [((2, 3, 6, 7),), ((2, 8, 24, 24),)],
          padding=[[1, 2, 3, 0], [2, 2, 2, 2]]),
    _pool("diopiPad", "replication_pad3d.default", [((1, 2, 4, 5, 6),), ((2, 4, 4, 4),)],
          padding=[[1, 1, 2, 0, 1, 2]]),
    *(Config(function, call=f"{HERE}.pad_backward", inputs={"input": Input()}, shapes=shapes,
             params={"pad": pads, "mode": [mode]})
      for function, mode, small_1d, small_2d in (("diopiReflectionPadBackward", "reflect", (3, 6), (3, 5, 5)),
                                                 ("diopiReplicationPadBackward", "replicate", (3, 1), (3, 1, 5)))
      for shapes, pads in (([((2, 3, 8),), (small_1d,), ((4, 16, 64),)], [[2, 3], [0, 1]]),
                           ([((2, 3, 6, 7),), (small_2d,), ((2, 8, 24, 24),)], [[1, 2, 3, 0], [2, 2, 2, 2]]),
                           ([((1, 2, 4, 5, 6),), ((2, 4, 4, 4),)], [[1, 1, 2, 0, 1, 2]]))),
    _pool("diopiMaxPool2d", "max_pool2d_with_indices.default", POOL2D, kernel_size=[[2, 2], [3, 3]],
          stride=[[], [2, 1]], padding=[[1, 1]], ceil_mode=[False]),
    _pool("diopiMaxPool2d", "max_pool2d_with_indices.default", POOL2D[:2], kernel_size=[[3, 3]], stride=[[2, 2]],
          padding=[[1, 1]], dilation=[[2, 2]], ceil_mode=[True]),
    _pool("diopiMaxPool2d", "max_pool2d.default", POOL2D[:2], kernel_size=[[3, 3]], stride=[[2, 2]],
          padding=[[1, 1]]),
    Config("diopiMaxPool2dBackward", from_forward="diopiMaxPool2d"),
    _pool("diopiMaxPool3d", "max_pool3d_with_indices.default", POOL3D, kernel_size=[[2, 2, 2], [3, 2, 3]],
          stride=[[2, 2, 2]], padding=[[1, 1, 1]]),
    _pool("diopiMaxPool3d", "max_pool3d_with_indices.default", POOL3D[:2], kernel_size=[[2, 2, 2]],
          stride=[[1, 2, 1]], dilation=[[2, 1, 1]], ceil_mode=[True]),
    Config("diopiMaxPool3dBackward", from_forward="diopiMaxPool3d"),
    _pool("diopiAvgPool2d", "avg_pool2d.default", POOL2D, kernel_size=[[3, 3]], stride=[[2, 2]],
          padding=[[1, 1]], ceil_mode=[False, True], count_include_pad=[True, False]),
    _pool("diopiAvgPool2d", "avg_pool2d.default", POOL2D[:2], kernel_size=[[3, 3]], stride=[[1, 2]],
          divisor_override=[5]),
    Config("diopiAvgPool2dBackward", from_forward="diopiAvgPool2d"),
    _pool("diopiAvgPool3d", "avg_pool3d.default", POOL3D, F32_F64, kernel_size=[[3, 3, 3]], stride=[[2, 2, 2]],
          padding=[[1, 1, 1]], ceil_mode=[True], count_include_pad=[True, False],
          note="PyTorch's CPU avg_pool3d has no float16 or bfloat16 kernel (unbatched)"),
    _pool("diopiAvgPool3d", "avg_pool3d.default", POOL3D[:2], F32_F64, kernel_size=[[2, 2, 2]],
          divisor_override=[3]),
    Config("diopiAvgPool3dBackward", from_forward="diopiAvgPool3d"),
    _pool("diopiAdaptiveAvgPool2d", "_adaptive_avg_pool2d.default", POOL2D + [((0, 3, 4, 4),)],
          output_size=[[1, 1], [3, 4]]),
    Config("diopiAdaptiveAvgPool2dBackward", from_forward="diopiAdaptiveAvgPool2d"),
    _pool("diopiAdaptiveAvgPool3d", "_adaptive_avg_pool3d.default", POOL3D, output_size=[[1, 1, 1], [2, 3, 4]]),
    Config("diopiAdaptiveAvgPool3dBackward", from_forward="diopiAdaptiveAvgPool3d"),
    _pool("diopiAdaptiveMaxPool2d", "adaptive_max_pool2d.default", POOL2D, output_size=[[1, 1], [3, 4]]),
    Config("diopiAdaptiveMaxPool2dBackward", from_forward="diopiAdaptiveMaxPool2d"),
    _pool("diopiAdaptiveMaxPool3d", "adaptive_max_pool3d.default", POOL3D, output_size=[[1, 1, 1], [2, 3, 4]]),
    Config("diopiAdaptiveMaxPool3dBackward", from_forward="diopiAdaptiveMaxPool3d"),
    Config("diopiFractionalMaxPool2d", op="fractional_max_pool2d.default",
           inputs={"self": Input(), "random_samples": SAMPLES},
           shapes=[((2, 3, 9, 9), (2, 3, 2)), ((1, 4, 10, 8), (1, 4, 2)), ((3, 7, 7), (1, 3, 2)),
                   ((2, 8, 24, 24), (2, 8, 2))],
           params={"kernel_size": [[2, 2]], "output_size": [[4, 4], [5, 3]]},
           note="deterministic given its sample offsets (the random part is drawing them)"),
    Config("diopiFractionalMaxPool2dBackward", from_forward="diopiFractionalMaxPool2d"),
    Config("diopiFractionalMaxPool3d", op="fractional_max_pool3d.default",
           inputs={"self": Input(), "random_samples": SAMPLES},
           shapes=[((1, 2, 7, 7, 7), (1, 2, 3)), ((2, 3, 6, 8, 6), (2, 3, 3)), ((2, 6, 6, 6), (1, 2, 3))],
           params={"kernel_size": [[2, 2, 2]], "output_size": [[3, 3, 3], [4, 2, 3]]},
           note="deterministic given its sample offsets"),
    Config("diopiFractionalMaxPool3dBackward", from_forward="diopiFractionalMaxPool3d"),
    Config("diopiMaxUnpool2d", call=f"{HERE}.max_unpool", inputs={"input": Input()},
           shapes=[((2, 3, 8, 8),), ((1, 4, 6, 9),), ((4, 16, 16, 16),)], dtypes=FLOAT,
           params={"kernel": [2, 3], "dims": [2]}),
    Config("diopiMaxUnpool3d", call=f"{HERE}.max_unpool", inputs={"input": Input()},
           shapes=[((1, 2, 6, 6, 6),), ((2, 3, 4, 8, 6),), ((2, 4, 8, 8, 8),)], dtypes=FLOAT,
           params={"kernel": [2, 3], "dims": [3]}),
    Config("diopiUnfold", op="im2col.default", inputs={"self": Input()},
           shapes=[((2, 3, 8, 8),), ((3, 6, 7),), ((2, 8, 16, 16),)],
           params={"kernel_size": [[2, 2], [3, 3]], "dilation": [[1, 1]], "padding": [[1, 1]],
                   "stride": [[1, 1], [2, 2]]}),
    Config("diopiUnfold", op="col2im.default", inputs={"self": Input()},
           shapes=[((2, 27, 9),), ((18, 9),), ((0, 27, 9),), ((2, 72, 9),)],
           params={"output_size": [[5, 5]], "kernel_size": [[3, 3]], "dilation": [[1, 1]],
                   "padding": [[0, 0]], "stride": [[1, 1]]},
           note="9 blocks of 3x3 in a 5x5 image (27 = 3 channels x 9)"),
    Config("diopiUnfold", op="col2im.default", inputs={"self": Input()}, shapes=[((2, 27, 9),), ((2, 72, 9),)],
           params={"output_size": [[5, 5]], "kernel_size": [[3, 3]], "dilation": [[1, 1]],
                   "padding": [[1, 1]], "stride": [[2, 2]]}, note="padding 1 stride 2: 9 blocks again"),
]
