"""Conformance cases of the matmul family: products, distances and linear algebra.

Linear-algebra functions that need well-posed inputs (symmetric positive-definite, triangular, invertible
matrices) are ``call`` recipes: the callables below build such a matrix from the drawn values and call the
torch function, and the calls of the function's operators are recorded as its cases.
"""

from __future__ import annotations

import math

import torch

from diopi.conformance.spec import FLOAT, Config, Input, Values

F64_F32 = (torch.float32, torch.float64)
HERE = "diopi.conformance.configs.matmul"
SMALL = Values("normal", -1, 1)
NORMAL = Values()


def _spd(a: torch.Tensor) -> torch.Tensor:
    """A symmetric positive-definite matrix (batch) from square ``a``: ``a a^T + n I``."""
    n = a.shape[-1]
    return a @ a.mT + n * torch.eye(n, dtype=a.dtype)


def _well_conditioned(a: torch.Tensor) -> torch.Tensor:
    """``a`` made diagonally dominant, hence invertible and well conditioned."""
    n = a.shape[-1]
    return a + (n + 1) * torch.eye(n, dtype=a.dtype)


def cholesky(a: torch.Tensor, upper: bool, transposed: bool) -> None:
    """``linalg.cholesky_ex`` and ``cholesky`` of an SPD matrix (its transpose: a non-contiguous view)."""
    spd = _spd(a)
    spd = spd.mT if transposed else spd
    torch.linalg.cholesky_ex(spd, upper=upper)
    torch.ops.aten.cholesky(spd, upper)


def cholesky_solve(a: torch.Tensor, b: torch.Tensor, upper: bool) -> None:
    """``cholesky_solve`` (and its helper) of ``b`` against an SPD matrix's factor."""
    factor = torch.linalg.cholesky(_spd(a), upper=upper)
    torch.cholesky_solve(b, factor, upper=upper)
    torch.ops.aten._cholesky_solve_helper(b, factor, upper)


def cholesky_inverse(a: torch.Tensor, upper: bool) -> None:
    torch.cholesky_inverse(torch.linalg.cholesky(_spd(a), upper=upper), upper=upper)


def inv(a: torch.Tensor) -> None:
    torch.linalg.inv_ex(_well_conditioned(a))


def solve(a: torch.Tensor, b: torch.Tensor, left: bool) -> None:
    torch.linalg.solve(_well_conditioned(a), b, left=left)


def lu_solve(a: torch.Tensor, b: torch.Tensor, left: bool, adjoint: bool) -> None:
    lu, pivots = torch.linalg.lu_factor(_well_conditioned(a))
    torch.linalg.lu_solve(lu, pivots, b, left=left, adjoint=adjoint)


def lu_unpack(a: torch.Tensor, unpack_data: bool) -> None:
    lu, pivots = torch.linalg.lu_factor(_well_conditioned(a))
    torch.lu_unpack(lu, pivots, unpack_data=unpack_data)


def eigh(a: torch.Tensor, uplo: str) -> None:
    """``linalg.eigh`` of a symmetric matrix with well-separated eigenvalues (eigenvectors are then unique up to
    sign, which the reference and a conforming kernel agree on only for the same algorithm: compare values)."""
    torch.linalg.eigh(a + a.mT, UPLO=uplo)


def triangular_solve(a: torch.Tensor, b: torch.Tensor, upper: bool, left: bool) -> None:
    """``linalg.solve_triangular`` and ``triangular_solve`` against a well-conditioned triangular matrix."""
    tri = _well_conditioned(a).triu() if upper else _well_conditioned(a).tril()
    torch.linalg.solve_triangular(tri, b, upper=upper, left=left)
    if left:
        torch.triangular_solve(b, tri, upper=upper)


def _op(function: str, op: str, names: tuple[str, ...], shapes: list, dtypes: tuple = FLOAT,
        params: dict | None = None, inplace: str | None = None, values: Values = NORMAL, note: str = "",
        layouts: tuple | None = None) -> Config:
    extra = {"layouts": layouts or ("contiguous", "noncontiguous")}
    return Config(function, op=op, inputs={n: Input() for n in names}, shapes=shapes, dtypes=dtypes,
                  params=dict(params or {}), inplace=inplace, values=values, note=note, **extra)


def _call(function: str, name: str, inputs: tuple[str, ...], shapes: list, params: dict, note: str = "",
          values: Values = SMALL) -> Config:
    return Config(function, call=f"{HERE}.{name}", inputs={n: Input() for n in inputs}, shapes=shapes,
                  dtypes=F64_F32, params=params, values=values, note=note)


SQUARE = [((0, 0),), ((1, 1),), ((4, 4),), ((3, 5, 5),), ((24, 24),)]

CONFIGS: list[Config] = [
    _op("diopiMm", "mm.default", ("self", "mat2"),
        [((0, 3), (3, 4)), ((3, 0), (0, 4)), ((1, 1), (1, 1)), ((5, 7), (7, 3)), ((64, 96), (96, 32))]),
    _op("diopiBmm", "bmm.default", ("self", "mat2"),
        [((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5)), ((3, 5, 7), (3, 7, 2)), ((8, 32, 64), (8, 64, 16))]),
    _op("diopiAddmm", "addmm.default", ("self", "mat1", "mat2"),
        [((5,), (4, 7), (7, 5)), ((4, 5), (4, 7), (7, 5)), ((1, 1), (0, 3), (3, 1)), ((64,), (32, 96), (96, 64))],
        params={"beta": [1.0, 0.5], "alpha": [2.0]}, inplace="addmm_.default"),
    _op("diopiBaddbmm", "baddbmm.default", ("self", "batch1", "batch2"),
        [((3, 4, 5), (3, 4, 6), (3, 6, 5)), ((5,), (2, 3, 4), (2, 4, 5)), ((0, 2, 2), (0, 2, 3), (0, 3, 2)),
         ((4, 32, 32), (4, 32, 48), (4, 48, 32))],
        params={"beta": [1.0, 0.0], "alpha": [0.5]}, inplace="baddbmm_.default",
        note="beta 0 ignores self (NaN in self must not propagate)"),
    _op("diopiMv", "mv.default", ("self", "vec"),
        [((0, 3), (3,)), ((3, 0), (0,)), ((1, 1), (1,)), ((5, 7), (7,)), ((128, 256), (256,))]),
    _op("diopiDot", "dot.default", ("self", "tensor"), [((0,), (0,)), ((1,), (1,)), ((7,), (7,)), ((4096,), (4096,))]),
    _op("diopiDot", "vdot.default", ("self", "other"), [((5,), (5,)), ((1000,), (1000,))]),
    _op("diopiAddmv", "addmv.default", ("self", "mat", "vec"),
        [((5,), (5, 7), (7,)), ((1,), (4, 3), (3,)), ((0,), (0, 3), (3,)), ((128,), (128, 256), (256,))],
        params={"beta": [0.5], "alpha": [1.0, 2.0]}, inplace="addmv_.default"),
    _op("diopiAddr", "addr.default", ("self", "vec1", "vec2"),
        [((4, 5), (4,), (5,)), ((3, 1), (3,), (1,)), ((0, 3), (0,), (3,)), ((64, 128), (64,), (128,))],
        params={"beta": [1.0, 0.5], "alpha": [2.0]}, inplace="addr_.default"),
    _op("diopiAddr", "addr.default", ("self", "vec1", "vec2"), [((1, 5), (3,), (5,)), ((5,), (4,), (5,))],
        params={"beta": [0.5]}, note="self broadcast to the outer product"),
    _op("diopiAddbmm", "addbmm.default", ("self", "batch1", "batch2"),
        [((4, 5), (3, 4, 6), (3, 6, 5)), ((5,), (2, 3, 4), (2, 4, 5)), ((2, 2), (0, 2, 3), (0, 3, 2)),
         ((32, 32), (4, 32, 48), (4, 48, 32))],
        params={"beta": [0.5], "alpha": [1.0, 2.0]}, inplace="addbmm_.default"),
    _op("diopiAddmmActivation", "_addmm_activation.default", ("self", "mat1", "mat2"),
        [((5,), (4, 7), (7, 5)), ((4, 5), (4, 7), (7, 5)), ((64,), (32, 96), (96, 64))],
        params={"beta": [1.0, 0.5], "use_gelu": [False, True]}),
    Config("diopiLinear", op="linear.default", inputs={"input": Input(), "weight": Input(), "bias": Input()},
           shapes=[((4, 6), (5, 6), (5,)), ((2, 3, 6), (5, 6), (5,)), ((6,), (5, 6), (5,)), ((0, 6), (3, 6), (3,)),
                   ((64, 128), (96, 128), (96,))],
           params={"bias=None": [False, True]}),
    _op("diopiCdist", "_cdist_forward.default", ("x1", "x2"),
        [((5, 3), (4, 3)), ((2, 6, 4), (2, 5, 4)), ((0, 3), (4, 3)), ((40, 8), (30, 8))], dtypes=F64_F32,
        params={"p": [1.0, 2.0, 3.0, math.inf], "compute_mode": [None]}),
    _op("diopiCdist", "_cdist_forward.default", ("x1", "x2"), [((40, 8), (30, 8)), ((3, 5), (4, 5))],
        dtypes=F64_F32, params={"p": [2.0], "compute_mode": [1, 2]}, note="p=2 through the matrix product or not"),
    Config("diopiCdistBackward", from_forward="diopiCdist", dtypes=F64_F32, layouts=("contiguous",),
           note="the backward kernel takes contiguous gradients only"),
    _op("diopiPdist", "_pdist_forward.default", ("self",), [((5, 3),), ((1, 4),), ((2, 1),), ((48, 16),)],
        dtypes=F64_F32, params={"p": [1.0, 2.0, 3.0, math.inf]}, layouts=("contiguous", "offset"),
        note="contiguous input only; no empty input: PyTorch's _pdist_backward crashes on a 0-row input (a "
             "1-row input gives the empty output)"),
    Config("diopiPdistBackward", from_forward="diopiPdist", dtypes=F64_F32, layouts=("contiguous",),
           note="the backward kernel takes contiguous inputs only"),
    _op("diopiLinalgCross", "linalg_cross.default", ("self", "other"),
        [((3,), (3,)), ((4, 3), (4, 3)), ((2, 1, 3), (1, 5, 3)), ((0, 3), (0, 3)), ((512, 3), (512, 3))],
        params={"dim": [-1]}),
    _op("diopiLinalgCross", "linalg_cross.default", ("self", "other"), [((3, 4), (3, 4)), ((2, 3, 5), (2, 3, 5))],
        params={"dim": [-2]}),
    _call("diopiCholesky", "cholesky", ("a",), [((1, 1),), ((4, 4),), ((3, 5, 5),), ((24, 24),)],
          {"upper": [False, True], "transposed": [False, True]}),
    _call("diopiCholeskySolve", "cholesky_solve", ("a", "b"),
          [((4, 4), (4, 3)), ((2, 5, 5), (2, 5, 2)), ((1, 1), (1, 1)), ((16, 16), (16, 8))], {"upper": [False, True]}),
    _call("diopiCholeskyInverse", "cholesky_inverse", ("a",), SQUARE[1:], {"upper": [False, True]}),
    _call("diopiInv", "inv", ("a",), SQUARE, {}),
    _op("diopiInv", "linalg_inv_ex.default", ("A",), [((3, 3),), ((2, 4, 4),)], dtypes=F64_F32,
        params={"check_errors": [False]}, note="a random matrix (invertible with probability 1)"),
    _call("diopiLinalgSolve", "solve", ("a", "b"),
          [((4, 4), (4, 3)), ((2, 5, 5), (2, 5, 2)), ((3, 3), (3,)), ((16, 16), (16, 8))], {"left": [True]}),
    _call("diopiLinalgSolve", "solve", ("a", "b"), [((4, 4), (3, 4)), ((2, 5, 5), (2, 2, 5))], {"left": [False]}),
    _op("diopiLuFactor", "linalg_lu_factor_ex.default", ("A",), SQUARE + [((4, 6),)], dtypes=F64_F32,
        params={"pivot": [True]}),
    _op("diopiLu", "linalg_lu.default", ("A",), SQUARE + [((4, 6),), ((6, 4),)], dtypes=F64_F32,
        params={"pivot": [True]}),
    _call("diopiLuSolve", "lu_solve", ("a", "b"), [((4, 4), (4, 3)), ((2, 5, 5), (2, 5, 2)), ((12, 12), (12, 4))],
          {"left": [True], "adjoint": [False, True]}),
    _call("diopiLuSolve", "lu_solve", ("a", "b"), [((4, 4), (3, 4))], {"left": [False], "adjoint": [False, True]}),
    _call("diopiLuUnpack", "lu_unpack", ("a",), SQUARE[1:], {"unpack_data": [True]}),
    _op("diopiQr", "linalg_qr.default", ("A",), [((0, 0),), ((1, 1),), ((5, 3),), ((3, 5),), ((2, 4, 4),),
                                                  ((32, 16),)],
        dtypes=F64_F32, params={"mode": ["reduced", "complete", "r"]}),
    _op("diopiSvd", "_linalg_svd.default", ("A",), [((1, 1),), ((5, 3),), ((3, 5),), ((2, 4, 4),), ((24, 16),)],
        dtypes=F64_F32, params={"full_matrices": [False], "compute_uv": [True, False]}),
    _op("diopiSvd", "_linalg_svd.default", ("A",), [((5, 3),), ((3, 5),)], dtypes=F64_F32,
        params={"full_matrices": [True], "compute_uv": [True]}),
    _call("diopiEigh", "eigh", ("a",), [((1, 1),), ((4, 4),), ((3, 5, 5),), ((24, 24),)], {"uplo": ["L", "U"]}),
    _op("diopiDet", "_linalg_det.default", ("A",), SQUARE, dtypes=F64_F32),
    _op("diopiSlogdet", "_linalg_slogdet.default", ("A",), SQUARE, dtypes=F64_F32),
    _call("diopiTriangularSolve", "triangular_solve", ("a", "b"),
          [((4, 4), (4, 3)), ((2, 5, 5), (2, 5, 2)), ((16, 16), (16, 8))], {"upper": [False, True], "left": [True]}),
    _call("diopiTriangularSolve", "triangular_solve", ("a", "b"), [((4, 4), (3, 4)), ((2, 5, 5), (2, 2, 5))],
          {"upper": [False, True], "left": [False]}),
    _op("diopiMatrixExp", "linalg_matrix_exp.default", ("self",), SQUARE + [((2, 3, 3),)], dtypes=F64_F32,
        values=SMALL),
]
