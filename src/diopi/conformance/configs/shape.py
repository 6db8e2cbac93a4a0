"""Conformance cases of the shape family: concatenation, reordering, triangles and diagonals, fills and copies,
factories, scatters into views and the backward functions of views."""

from __future__ import annotations

import torch

from diopi.conformance.spec import Config, Input, Values

FLOAT3 = (torch.float32, torch.float16, torch.bfloat16)
F32_BF16 = (torch.float32, torch.bfloat16)
DATA = FLOAT3 + (torch.int64,)
F32 = (torch.float32,)
D3 = (torch.float32, torch.bfloat16, torch.int64)

SHAPES = [((),), ((0, 3),), ((4, 5, 6),), ((32, 48),)]
MATRICES = [((0, 3),), ((4, 6),), ((6, 4),), ((2, 5, 5),), ((48, 64),)]


def one(function: str, op: str, shapes: list, params: dict | None = None, dtypes: tuple = DATA,
        layouts: tuple | None = None, note: str = "") -> Config:
    """A one-tensor op (input ``self``)."""
    extra = {"layouts": layouts} if layouts else {}
    return Config(function, op=op, inputs={"self": Input()}, shapes=list(shapes), dtypes=dtypes,
                  params=dict(params or {}), note=note, **extra)


def grad_of(function: str, op: str, grad_shape: tuple, params: dict, dtypes: tuple = FLOAT3) -> Config:
    """A view's backward function: the gradient ``grad_shape`` placed back into ``input_sizes`` zeros."""
    name = "grad_in" if op.startswith("unfold") else "grad_output"
    return Config(function, op=op, inputs={name: Input()}, shapes=[(grad_shape,)], dtypes=dtypes,
                  params={k: [v] for k, v in params.items()})


CONFIGS: list[Config] = [
    Config("diopiCat", op="cat.default", inputs={"tensors": Input(list_of=3)},
           shapes=[([(4, 5), (2, 5), (0, 5)],), ([(2, 3, 4)] * 3,), ([(64, 48), (1, 48), (16, 48)],),
                   ([(0,), (4, 5), (3, 5)],)],
           dtypes=DATA + (torch.bool,), params={"dim": [0]}, note="a 1-D empty tensor is skipped by cat"),
    Config("diopiCat", op="cat.default", inputs={"tensors": Input(list_of=2)},
           shapes=[([(4, 5), (4, 2)],), ([(2, 3, 4), (2, 3, 1)],)], dtypes=F32_BF16, params={"dim": [-1]}),
    Config("diopiStack", op="stack.default", inputs={"tensors": Input(list_of=3)},
           shapes=[((),), ((0, 3),), ((4, 5),), ((32, 48),)], dtypes=D3, params={"dim": [0, -1]}),
    one("diopiFlip", "flip.default", SHAPES[1:], {"dims": [[0], [0, -1]]}),
    one("diopiRoll", "roll.default", SHAPES[1:], {"shifts": [[2], [-7]], "dims": [[1]]}),
    one("diopiRoll", "roll.default", [((4, 5, 6),)], {"shifts": [[3]], "dims": [[]]},
        dtypes=F32, note="no dims: the flattened tensor is rolled"),
    one("diopiRoll", "roll.default", [((4, 5, 6),)], {"shifts": [[1, -2]], "dims": [[0, 2]]}, dtypes=F32),
    one("diopiRot90", "rot90.default", MATRICES[:2] + MATRICES[3:], {"k": [1, 2, -1], "dims": [[0, 1]]},
        dtypes=F32_BF16),
    one("diopiRepeat", "repeat.default", SHAPES, {"repeats": [[2, 1, 3], [1, 1, 2, 2]]}, dtypes=D3),
    Config("diopiRepeatInterleave", op="repeat_interleave.Tensor",
           inputs={"repeats": Input(torch.int64, Values("integer", 0, 4))},
           shapes=[((0,),), ((1,),), ((7,),), ((500,),)], dtypes=F32,
           note="repeats is the only tensor: index i repeated repeats[i] times"),
    one("diopiTril", "tril.default", MATRICES, {"diagonal": [0, -1]}, dtypes=D3),
    one("diopiTril", "tril.default", MATRICES[1:3], {"diagonal": [2]}, dtypes=(torch.bool, torch.float16)),
    one("diopiTril", "tril_.default", MATRICES[1:3], {"diagonal": [1]}, dtypes=F32),
    one("diopiTriu", "triu.default", MATRICES, {"diagonal": [0, 1]}, dtypes=D3),
    one("diopiTriu", "triu.default", MATRICES[1:3], {"diagonal": [-2]}, dtypes=(torch.bool, torch.float16)),
    one("diopiTriu", "triu_.default", MATRICES[1:3], {"diagonal": [-1]}, dtypes=F32),
    one("diopiDiagEmbed", "diag_embed.default", [((0,),), ((5,),), ((3, 4),), ((2, 64),)],
        {"offset": [0, -2]}, dtypes=FLOAT3),
    one("diopiDiagEmbed", "diag_embed.default", [((3, 4),)], {"offset": [0], "dim1": [0], "dim2": [2]}, dtypes=F32),
    one("diopiDiagonalCopy", "diagonal_copy.default", MATRICES, {"offset": [0, 1]}, dtypes=D3),
    one("diopiDiagonalCopy", "diagonal_copy.default", [((3, 4, 5),)], {"offset": [0], "dim1": [-1], "dim2": [0]},
        dtypes=F32),
    Config("diopiBlockDiag", op="block_diag.default", inputs={"tensors": Input(list_of=3)},
           shapes=[([(2, 3), (1, 1), (4, 2)],), ([(0, 3), (2, 2), (3, 0)],), ([(32, 16), (16, 32), (5,)],)],
           dtypes=DATA, layouts=("contiguous", "noncontiguous")),
    one("diopiNarrowCopy", "narrow_copy.default", [((4, 5, 6),), ((32, 48),)],
        {"dim": [1], "start": [0, 2], "length": [3]}),
    one("diopiNarrowCopy", "narrow_copy.default", [((7,),)], {"dim": [0], "start": [-3], "length": [2]},
        dtypes=F32),
    # fills and copies
    one("diopiFill", "fill.Scalar", SHAPES, {"value": [-2.5]}),
    one("diopiFill", "fill_.Scalar", SHAPES[2:], {"value": [7]}, dtypes=DATA + (torch.bool,)),
    Config("diopiFill", op="fill_.Tensor", inputs={"self": Input(), "value": Input()},
           shapes=[((4, 5, 6), ()), ((32, 48), ())], dtypes=F32_BF16),
    one("diopiFill", "zero_.default", SHAPES, dtypes=F32_BF16),
    one("diopiFill", "zeros_like.default", SHAPES[1:3], dtypes=F32_BF16),
    one("diopiFill", "ones_like.default", SHAPES[1:3], dtypes=F32_BF16),
    one("diopiFill", "full_like.default", SHAPES[1:3], {"fill_value": [3.5]}, dtypes=F32_BF16),
    one("diopiFill", "new_zeros.default", SHAPES[2:3], {"size": [[3, 4]]}, dtypes=F32_BF16),
    one("diopiFill", "new_full.default", SHAPES[2:3], {"size": [[3, 4]], "fill_value": [-1]}, dtypes=F32_BF16),
    one("diopiCopy", "clone.default", SHAPES, dtypes=D3 + (torch.bool,)),
    Config("diopiCopy", op="copy.default", inputs={"self": Input(), "src": Input(torch.float64)},
           shapes=[((0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6)), ((4, 5, 6), (6,)), ((32, 48), ())], dtypes=DATA,
           note="src in float64: copy converts dtypes and broadcasts"),
    Config("diopiCopy", op="copy_.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 5, 6), (4, 5, 6)), ((32, 48), (48,))], dtypes=DATA),
    one("diopiCopy", "_to_copy.default", SHAPES[1:], {"dtype": [torch.bfloat16, torch.int32]},
        dtypes=(torch.float32, torch.int64), note="dtype conversions"),
    # factories (no tensor input: the case dtype is not used, the dtype is a param)
    Config("diopiEye", op="eye.default", params={"n": [0, 1, 5, 64], "dtype": [torch.float32, torch.int64]},
           dtypes=F32),
    Config("diopiEye", op="eye.m", params={"n": [3, 40], "m": [5, 1], "dtype": [torch.float32, torch.bfloat16]},
           dtypes=F32),
    Config("diopiLinspace", op="linspace.default",
           params={"start": [0.0, -3.0], "end": [1.0, 10.0], "steps": [0, 1, 7, 1000], "dtype": [torch.float32]},
           dtypes=F32),
    Config("diopiLinspace", op="linspace.default",
           params={"start": [-3], "end": [10], "steps": [5, 14], "dtype": [torch.int64, torch.float64,
                                                                          torch.bfloat16]}, dtypes=F32),
    Config("diopiLogspace", op="logspace.default",
           params={"start": [0.0, -2.0], "end": [2.0], "steps": [0, 1, 7, 500], "base": [10.0, 2.0],
                   "dtype": [torch.float32]}, dtypes=F32),
    Config("diopiLogspace", op="logspace.default",
           params={"start": [0], "end": [3], "steps": [4], "base": [2.0], "dtype": [torch.int64, torch.float64]},
           dtypes=F32),
    Config("diopiArange", op="arange.start_step",
           params={"start": [0, -5], "end": [7, 1000], "step": [1, 3], "dtype": [torch.int64, torch.float32]},
           dtypes=F32),
    Config("diopiArange", op="arange.start_step",
           params={"start": [0.5, -1.0], "end": [2.0], "step": [0.1, 0.25], "dtype": [torch.float32, torch.float64]},
           dtypes=F32, note="fractional steps"),
    Config("diopiArange", op="arange.default", params={"end": [0, 5, 100], "dtype": [torch.int64, torch.bfloat16]},
           dtypes=F32),
    # the same through their out= overloads: what a device factory call (torch.eye(..., device=...)) reaches
    Config("diopiEye", op="eye.m_out", inputs={"out": Input()}, shapes=[((0,),)], dtypes=(torch.float32,
           torch.bfloat16, torch.int64), params={"n": [0, 4, 40], "m": [3]}, layouts=("contiguous",),
           note="an empty out, resized by the call"),
    Config("diopiLinspace", op="linspace.out", inputs={"out": Input()}, shapes=[((0,),)], dtypes=FLOAT3,
           params={"start": [-3.0], "end": [10.0], "steps": [1, 7, 1000]}, layouts=("contiguous",)),
    Config("diopiLogspace", op="logspace.out", inputs={"out": Input()}, shapes=[((0,),)], dtypes=FLOAT3,
           params={"start": [-2.0], "end": [2.0], "steps": [1, 7, 500], "base": [10.0]}, layouts=("contiguous",)),
    Config("diopiArange", op="arange.start_out", inputs={"out": Input()}, shapes=[((0,),)],
           dtypes=(torch.float32, torch.int64, torch.bfloat16),
           params={"start": [0, -5], "end": [7, 1000], "step": [3]}, layouts=("contiguous",)),
    # scatters into views
    Config("diopiSliceScatter", op="slice_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 6), (4, 2)), ((2, 3, 6), (2, 3, 2))], dtypes=DATA,
           params={"dim": [-1], "start": [1], "end": [5], "step": [2]}),
    Config("diopiSliceScatter", op="slice_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((8, 5), (3, 5)), ((64, 48), (3, 48))], dtypes=F32_BF16,
           params={"dim": [0], "start": [2], "end": [5]}),
    Config("diopiSelectScatter", op="select_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 6), (6,)), ((2, 3, 6), (3, 6)), ((64, 48), (48,)), ((5,), ())], dtypes=DATA,
           params={"dim": [0], "index": [1, -1]}),
    Config("diopiDiagonalScatter", op="diagonal_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 6), (4,)), ((6, 6), (6,)), ((64, 64), (64,))], dtypes=DATA, params={"offset": [0]}),
    Config("diopiDiagonalScatter", op="diagonal_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 6), (4,)), ((5, 5), (4,))], dtypes=F32_BF16, params={"offset": [1]}),
    Config("diopiDiagonalScatter", op="diagonal_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 6), (3,))], dtypes=F32, params={"offset": [-1]}),
    Config("diopiAsStridedScatter", op="as_strided_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((4, 6), (2, 3))], dtypes=DATA,
           params={"size": [[2, 3]], "stride": [[12, 2]], "storage_offset": [0, 1]}, layouts=("contiguous",),
           note="strides count in the input's storage, so only contiguous inputs"),
    Config("diopiAsStridedScatter", op="as_strided_scatter.default", inputs={"self": Input(), "src": Input()},
           shapes=[((64, 48), (16, 8))], dtypes=F32_BF16,
           params={"size": [[16, 8]], "stride": [[96, 3]], "storage_offset": [None, 5]}, layouts=("contiguous",)),
    # backward functions of views
    grad_of("diopiSliceBackward", "slice_backward.default", (4, 2),
            {"input_sizes": [4, 6], "dim": 1, "start": 1, "end": 5, "step": 2}),
    grad_of("diopiSliceBackward", "slice_backward.default", (3, 48),
            {"input_sizes": [64, 48], "dim": 0, "start": 2, "end": 5, "step": 1}),
    grad_of("diopiSliceBackward", "select_backward.default", (6,), {"input_sizes": [4, 6], "dim": 0, "index": 2}),
    grad_of("diopiSliceBackward", "select_backward.default", (2, 3), {"input_sizes": [2, 5, 3], "dim": 1,
                                                                    "index": -1}),
    grad_of("diopiDiagonalBackward", "diagonal_backward.default", (4,),
            {"input_sizes": [4, 6], "offset": 0, "dim1": 0, "dim2": 1}),
    grad_of("diopiDiagonalBackward", "diagonal_backward.default", (2, 4),
            {"input_sizes": [2, 5, 5], "offset": 1, "dim1": 1, "dim2": 2}),
    grad_of("diopiDiagonalBackward", "diagonal_backward.default", (64,),
            {"input_sizes": [64, 64], "offset": 0, "dim1": 1, "dim2": 0}),
    grad_of("diopiUnfoldBackward", "unfold_backward.default", (4, 4, 3),
            {"input_sizes": [4, 10], "dim": 1, "size": 3, "step": 2}),
    grad_of("diopiUnfoldBackward", "unfold_backward.default", (2, 5, 4),
            {"input_sizes": [8, 5], "dim": 0, "size": 4, "step": 4}),
    grad_of("diopiUnfoldBackward", "unfold_backward.default", (63, 48, 2),
            {"input_sizes": [64, 48], "dim": 0, "size": 2, "step": 1}),
]
