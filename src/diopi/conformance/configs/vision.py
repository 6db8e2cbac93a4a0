"""Conformance cases of the vision family: interpolation, grid sampling, pixel shuffles, ROI Align and NMS.

ROI Align and NMS take boxes, which the callables below build from drawn values (corners ordered, inside the
image, a batch index per box); their calls of the ``diopi::`` operators are recorded as cases.
"""

from __future__ import annotations

import torch

from diopi.conformance.spec import FLOAT, Config, Input, Values

HERE = "diopi.conformance.configs.vision"
F32_F64 = (torch.float32, torch.float64)
NO_HALF = (torch.float32, torch.bfloat16, torch.float64)
GRID = Input(values=Values("uniform", -1.2, 1.2))
TWO_LAYOUTS = ("contiguous", "noncontiguous")
UNIT = Input(values=Values("probability"), grad=False)


def _boxes(corners: torch.Tensor, height: float, width: float) -> torch.Tensor:
    """Boxes ``(x1, y1, x2, y2)`` inside ``[0, width] x [0, height]`` from values in [0, 1] (``[K, 4]``)."""
    c = corners.to(torch.float64)
    xs, _ = torch.sort(c[:, 0::2] * width, dim=1)
    ys, _ = torch.sort(c[:, 1::2] * height, dim=1)
    return torch.stack((xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]), 1).to(corners.dtype)


def roi_align(input: torch.Tensor, corners: torch.Tensor, spatial_scale: float, pooled: int, sampling_ratio: int,
              aligned: bool) -> torch.Tensor:
    """ROI Align of boxes drawn over the image (in input coordinates / spatial_scale), one per batch index in
    turn."""
    n, _, height, width = input.shape
    boxes = _boxes(corners, height / spatial_scale, width / spatial_scale)
    index = (torch.arange(boxes.shape[0]) % max(n, 1)).to(boxes.dtype).unsqueeze(1)
    rois = torch.cat((index, boxes), 1)
    return torch.ops.diopi.roi_align(input, rois, spatial_scale, pooled, pooled, sampling_ratio, aligned)


def nms(corners: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Non-maximum suppression of boxes drawn in a 32 x 32 image."""
    return torch.ops.diopi.nms(_boxes(corners, 32.0, 32.0), scores, iou_threshold)


def _resize(function: str, op: str, shapes: list, output_sizes: list, dtypes: tuple = FLOAT, **params: list) -> Config:
    return Config(function, op=op, inputs={"self": Input()}, shapes=shapes, dtypes=dtypes,
                  params={"output_size": output_sizes, **params}, layouts=TWO_LAYOUTS)


#: Batched inputs (the resize operators take no unbatched input).
B1 = [((2, 3, 7),), ((1, 5, 9),), ((4, 16, 64),)]
B2 = [((2, 3, 6, 7),), ((1, 4, 5, 9),), ((2, 8, 16, 16),)]
B3 = [((1, 2, 4, 5, 6),), ((2, 3, 3, 4, 4),), ((2, 4, 8, 8, 8),)]

CONFIGS: list[Config] = [
    _resize("diopiUpsampleNearest", "upsample_nearest1d.default", B1, [[14], [4]]),
    _resize("diopiUpsampleNearest", "upsample_nearest2d.default", B2, [[12, 14], [4, 3]]),
    _resize("diopiUpsampleNearest", "upsample_nearest2d.default", B2[:1], [[9, 10]], scales_h=[1.5], scales_w=[1.5]),
    _resize("diopiUpsampleNearest", "upsample_nearest3d.default", B3, [[8, 10, 12], [3, 2, 4]], NO_HALF),
    Config("diopiUpsampleNearestBackward", from_forward="diopiUpsampleNearest"),
    _resize("diopiUpsampleNearestExact", "_upsample_nearest_exact1d.default", B1, [[14], [4]]),
    _resize("diopiUpsampleNearestExact", "_upsample_nearest_exact2d.default", B2, [[12, 14], [4, 3]]),
    _resize("diopiUpsampleNearestExact", "_upsample_nearest_exact3d.default", B3, [[8, 10, 12], [3, 2, 4]], NO_HALF),
    Config("diopiUpsampleNearestExactBackward", from_forward="diopiUpsampleNearestExact"),
    _resize("diopiUpsampleLinear", "upsample_linear1d.default", B1, [[14], [4]], align_corners=[False, True]),
    _resize("diopiUpsampleLinear", "upsample_bilinear2d.default", B2, [[12, 14], [4, 3]], align_corners=[False, True]),
    Config("diopiUpsampleLinearBackward", from_forward="diopiUpsampleLinear"),
    _resize("diopiUpsampleTrilinear3d", "upsample_trilinear3d.default", B3, [[8, 10, 12], [3, 2, 4]], NO_HALF,
            align_corners=[False, True]),
    Config("diopiUpsampleTrilinear3dBackward", from_forward="diopiUpsampleTrilinear3d"),
    _resize("diopiUpsampleBicubic2d", "upsample_bicubic2d.default", B2, [[12, 14], [4, 3]], NO_HALF,
            align_corners=[False, True]),
    Config("diopiUpsampleBicubic2dBackward", from_forward="diopiUpsampleBicubic2d"),
    _resize("diopiUpsampleAntialias", "_upsample_bilinear2d_aa.default", B2, [[3, 4], [12, 14]], F32_F64,
            align_corners=[False]),
    _resize("diopiUpsampleAntialias", "_upsample_bicubic2d_aa.default", B2, [[3, 4], [12, 14]], F32_F64,
            align_corners=[False]),
    Config("diopiUpsampleAntialiasBackward", from_forward="diopiUpsampleAntialias"),
    Config("diopiGridSampler2d", op="grid_sampler_2d.default", inputs={"input": Input(), "grid": GRID},
           shapes=[((2, 3, 6, 7), (2, 4, 5, 2))], dtypes=(torch.bfloat16,),
           params={"interpolation_mode": [0, 1], "padding_mode": [0], "align_corners": [False]}),
    Config("diopiGridSampler2d", op="grid_sampler_2d.default", inputs={"input": Input(), "grid": GRID},
           shapes=[((2, 3, 6, 7), (2, 4, 5, 2)), ((1, 2, 5, 5), (1, 1, 9, 2)), ((2, 4, 16, 16), (2, 12, 12, 2))],
           dtypes=F32_F64, layouts=TWO_LAYOUTS,
           params={"interpolation_mode": [0, 1, 2], "padding_mode": [0, 1, 2], "align_corners": [False, True]},
           note="modes: bilinear, nearest, bicubic x zeros, border, reflection; grid slightly outside [-1, 1]"),
    Config("diopiGridSampler2dBackward", from_forward="diopiGridSampler2d"),
    Config("diopiGridSampler3d", op="grid_sampler_3d.default", inputs={"input": Input(), "grid": GRID},
           shapes=[((1, 2, 4, 5, 6), (1, 3, 3, 4, 3)), ((2, 3, 6, 6, 6), (2, 4, 4, 4, 3))], dtypes=F32_F64,
           layouts=TWO_LAYOUTS,
           params={"interpolation_mode": [0, 1], "padding_mode": [0, 1, 2], "align_corners": [False, True]}),
    Config("diopiGridSampler3dBackward", from_forward="diopiGridSampler3d"),
    Config("diopiAffineGridGenerator", op="affine_grid_generator.default", inputs={"theta": Input()},
           shapes=[((2, 2, 3),)], params={"size": [[2, 3, 5, 7], [2, 1, 16, 16]], "align_corners": [False, True]}),
    Config("diopiAffineGridGenerator", op="affine_grid_generator.default", inputs={"theta": Input()},
           shapes=[((1, 3, 4),)], params={"size": [[1, 2, 3, 4, 5]], "align_corners": [False, True]},
           note="3-D: a volume's sampling grid"),
    Config("diopiPixelShuffle", op="pixel_shuffle.default", inputs={"self": Input()},
           shapes=[((1, 8, 3, 3),), ((2, 12, 4, 5),), ((4, 3, 2),), ((0, 4, 2, 2),), ((2, 16, 16, 16),)],
           params={"upscale_factor": [2]}),
    Config("diopiPixelShuffle", op="pixel_shuffle.default", inputs={"self": Input()}, shapes=[((2, 18, 4, 5),)],
           params={"upscale_factor": [3]}),
    Config("diopiPixelUnshuffle", op="pixel_unshuffle.default", inputs={"self": Input()},
           shapes=[((1, 2, 6, 6),), ((2, 3, 4, 8),), ((1, 4, 2),), ((0, 2, 4, 4),), ((2, 4, 32, 32),)],
           params={"downscale_factor": [2]}),
    Config("diopiChannelShuffle", op="channel_shuffle.default", inputs={"self": Input()},
           shapes=[((2, 8, 3, 3),), ((1, 8, 5),), ((0, 4, 2),), ((2, 16, 8, 8),)], params={"groups": [2, 4]}),
    Config("diopiChannelShuffle", op="native_channel_shuffle.default", inputs={"self": Input()},
           shapes=[((2, 6, 3, 3),), ((2, 12, 8, 8),)], params={"groups": [3, 2]}),
    Config("diopiRoiAlign", call=f"{HERE}.roi_align", inputs={"input": Input(), "corners": UNIT},
           shapes=[((2, 3, 16, 16), (5, 4)), ((1, 4, 12, 20), (3, 4)), ((2, 8, 24, 24), (8, 4))],
           dtypes=F32_F64, params={"spatial_scale": [1.0, 0.25], "pooled": [2], "sampling_ratio": [0, 2],
                                   "aligned": [False, True]}, layouts=("contiguous", "noncontiguous")),
    Config("diopiRoiAlign", call=f"{HERE}.roi_align", inputs={"input": Input(), "corners": UNIT},
           shapes=[((2, 3, 16, 16), (5, 4))], dtypes=FLOAT,
           params={"spatial_scale": [0.5], "pooled": [7], "sampling_ratio": [2], "aligned": [True]}),
    Config("diopiRoiAlign", call=f"{HERE}.roi_align", inputs={"input": Input(), "corners": UNIT},
           shapes=[((1, 2, 8, 8), (0, 4))], params={"spatial_scale": [1.0], "pooled": [3], "sampling_ratio": [2],
                                                     "aligned": [True]}, note="no boxes"),
    Config("diopiRoiAlignBackward", from_forward="diopiRoiAlign"),
    Config("diopiNms", call=f"{HERE}.nms", inputs={"corners": UNIT, "scores": Input(values=Values("probability"))},
           shapes=[((10, 4), (10,)), ((1, 4), (1,)), ((0, 4), (0,)), ((200, 4), (200,))], dtypes=F32_F64,
           params={"iou_threshold": [0.0, 0.3, 0.7]}, layouts=("contiguous", "noncontiguous")),
]
