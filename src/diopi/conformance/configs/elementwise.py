"""Conformance cases of the elementwise family: unary math, binary arithmetic, comparison, logic and bit ops."""

from __future__ import annotations

import torch

from diopi.conformance.spec import BOOL, INT, Config, Input, Values

F32_64 = (torch.float32, torch.float64)
FLOAT32_16 = (torch.float32, torch.float16)
#: The float dtypes most cases use (float64 is kept for the special functions).
FLOAT3 = (torch.float32, torch.float16, torch.bfloat16)
I64 = (torch.int64,)
F32_BF16 = (torch.float32, torch.bfloat16)
NO_HALF = (torch.float32, torch.bfloat16, torch.float64)

NORMAL = Values()
POSITIVE = Values("positive")
UNIT = Values("uniform", -0.95, 0.95)
SPECIAL = Values("special")
SMALL_INT = Values("integer", -20, 20)
EXPONENT = Values("uniform", -2, 2)

#: One tensor: 0-dim, empty, a small 3-D one with a size-1 dim, a "large" one.
UNARY_SHAPES = [((),), ((0, 3),), ((3, 1, 5),), ((32, 48),)]
#: Shapes an in-place overload is tried on (its output is its input).
INPLACE_SHAPES = [((5, 6),), ((16, 40),)]
#: Two tensors: empty, equal, broadcast (the first has the result's shape), a tensor with a 0-dim one.
BINARY_SHAPES = [((0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6)), ((4, 5, 6), (5, 1)), ((32, 48), ())]
INPLACE_BINARY_SHAPES = [((5, 6), (5, 6)), ((16, 40), (40,))]
#: Three tensors (addcmul, lerp with a weight tensor, clamp with tensor bounds).
TERNARY_SHAPES = [((0, 3), (0, 3), (0, 3)), ((4, 5, 6), (4, 5, 6), (4, 5, 6)), ((4, 5, 6), (5, 1), (6,)),
                  ((32, 48), (32, 48), ())]


def unary(function: str, op: str, inplace: str | None = None, *, values: Values = NORMAL,
          dtypes: tuple[torch.dtype, ...] = FLOAT3, params: dict | None = None, note: str = "") -> list[Config]:
    """A one-tensor op over :data:`UNARY_SHAPES`, plus its in-place overload on :data:`INPLACE_SHAPES`."""
    configs = [Config(function, op=op, inputs={"self": Input()}, shapes=list(UNARY_SHAPES), dtypes=dtypes,
                      values=values, params=dict(params or {}), note=note)]
    if inplace:
        configs.append(Config(function, op=inplace, inputs={"self": Input()}, shapes=list(INPLACE_SHAPES),
                              dtypes=dtypes[:1], values=values, params=dict(params or {}), note=note))
    return configs


def binary(function: str, op: str, inplace: str | None = None, *, values: Values = NORMAL,
           other: Values | None = None, dtypes: tuple[torch.dtype, ...] = FLOAT3, params: dict | None = None,
           shapes: list | None = None, note: str = "") -> list[Config]:
    """A two-tensor op (``self``, ``other``) over :data:`BINARY_SHAPES`, plus its in-place overload."""
    inputs = {"self": Input(), "other": Input(values=other)}
    configs = [Config(function, op=op, inputs=inputs, shapes=list(shapes or BINARY_SHAPES), dtypes=dtypes,
                      values=values, params=dict(params or {}), note=note)]
    if inplace:
        configs.append(Config(function, op=inplace, inputs=inputs, shapes=list(INPLACE_BINARY_SHAPES),
                              dtypes=dtypes[:1], values=values, params=dict(params or {}), note=note))
    return configs


def with_scalar(function: str, op: str, scalars: list, *, values: Values = NORMAL,
                dtypes: tuple[torch.dtype, ...] = FLOAT32_16, name: str = "other") -> Config:
    """A tensor-scalar overload (``add.Scalar``): the tensor over two shapes, the scalar from ``scalars``."""
    return Config(function, op=op, inputs={"self": Input()}, shapes=[((4, 5, 6),), ((0, 2),)], dtypes=dtypes,
                  values=values, params={name: scalars}, layouts=("contiguous", "noncontiguous"))


CONFIGS: list[Config] = [
    # arithmetic
    *binary("diopiAdd", "add.Tensor", "add_.Tensor", dtypes=FLOAT3 + I64, params={"alpha": [1]}),
    Config("diopiAdd", op="add.Tensor", inputs={"self": Input(), "other": Input()},
           shapes=[((4, 5), (4, 5)), ((3, 4), (4,))], dtypes=(torch.float32, torch.bfloat16),
           params={"alpha": [2.5, -1]}),
    with_scalar("diopiAdd", "add.Scalar", [3, -1.5]),
    *binary("diopiSub", "sub.Tensor", "sub_.Tensor", dtypes=FLOAT3 + I64, params={"alpha": [1, 2]}),
    Config("diopiSub", op="rsub.Tensor", inputs={"self": Input(), "other": Input()},
           shapes=[((4, 5), (4, 5)), ((3, 4), ())], dtypes=FLOAT32_16, params={"alpha": [1, 0.5]}),
    with_scalar("diopiSub", "sub.Scalar", [2, -0.25]),
    *binary("diopiMul", "mul.Tensor", "mul_.Tensor", dtypes=FLOAT3 + I64 + BOOL),
    with_scalar("diopiMul", "mul.Scalar", [3, -0.5]),
    *binary("diopiDiv", "div.Tensor", "div_.Tensor", other=Values("uniform", 0.5, 3.0)),
    Config("diopiDiv", op="div.Tensor_mode", inputs={"self": Input(), "other": Input()},
           shapes=[((4, 5, 6), (4, 5, 6)), ((32, 48), (48,))], dtypes=F32_64,
           values=Values("uniform", -20, 20), params={"rounding_mode": ["trunc", "floor"]},
           layouts=("contiguous", "noncontiguous")),
    Config("diopiDiv", op="div.Tensor_mode", inputs={"self": Input(), "other": Input(values=Values("integer", 1, 7))},
           shapes=[((4, 5, 6), (4, 5, 6)), ((32, 48), (48,))], dtypes=INT,
           values=Values("integer", -50, 50), params={"rounding_mode": ["trunc", "floor"]},
           layouts=("contiguous", "noncontiguous")),
    with_scalar("diopiDiv", "div.Scalar", [4, -0.5]),
    *binary("diopiRemainder", "remainder.Tensor", "remainder_.Tensor", values=Values("uniform", -10, 10),
            other=Values("uniform", 1.0, 4.0), dtypes=F32_64 + I64),
    *binary("diopiRemainder", "fmod.Tensor", "fmod_.Tensor", values=Values("uniform", -10, 10),
            other=Values("uniform", 1.0, 4.0), dtypes=F32_64 + I64),
    with_scalar("diopiRemainder", "remainder.Scalar", [3, -2.5], values=Values("uniform", -10, 10),
                dtypes=F32_64),
    Config("diopiPow", op="pow.Tensor_Tensor", inputs={"self": Input(), "exponent": Input(values=EXPONENT)},
           shapes=list(BINARY_SHAPES), dtypes=FLOAT3, values=POSITIVE),
    Config("diopiPow", op="pow_.Tensor", inputs={"self": Input(), "exponent": Input(values=EXPONENT)},
           shapes=list(INPLACE_BINARY_SHAPES), dtypes=(torch.float32,), values=POSITIVE),
    Config("diopiPow", op="pow.Tensor_Scalar", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((0,),)],
           dtypes=FLOAT32_16, values=POSITIVE, params={"exponent": [2, 0.5, -1.5]},
           layouts=("contiguous", "noncontiguous")),
    Config("diopiPow", op="pow.Scalar", inputs={"exponent": Input()}, shapes=[((4, 5),), ((32, 48),)],
           dtypes=F32_64, params={"self": [2.0, 0.5]}, values=Values("uniform", -3, 3)),
    *unary("diopiNeg", "neg.default", "neg_.default", dtypes=FLOAT3 + I64),
    *unary("diopiAbs", "abs.default", "abs_.default", dtypes=FLOAT3 + I64, values=SPECIAL),
    *unary("diopiSign", "sign.default", "sign_.default", values=SPECIAL),
    *unary("diopiSign", "sgn.default", "sgn_.default", dtypes=FLOAT32_16 + INT),
    *unary("diopiReciprocal", "reciprocal.default", "reciprocal_.default", values=Values("uniform", 0.2, 5)),
    *unary("diopiSqrt", "sqrt.default", "sqrt_.default", values=POSITIVE),
    *unary("diopiRsqrt", "rsqrt.default", "rsqrt_.default", values=POSITIVE),
    *unary("diopiExp", "exp.default", "exp_.default", values=Values("uniform", -5, 5)),
    *unary("diopiExp2", "exp2.default", "exp2_.default", values=Values("uniform", -5, 5)),
    *unary("diopiExpm1", "expm1.default", "expm1_.default", values=Values("uniform", -3, 3)),
    *unary("diopiLog", "log.default", "log_.default", values=POSITIVE),
    *unary("diopiLog2", "log2.default", "log2_.default", values=POSITIVE),
    *unary("diopiLog10", "log10.default", "log10_.default", values=POSITIVE),
    *unary("diopiLog1p", "log1p.default", "log1p_.default", values=Values("uniform", -0.9, 4)),
    # trigonometric and hyperbolic
    *unary("diopiSin", "sin.default", "sin_.default"),
    *unary("diopiCos", "cos.default", "cos_.default"),
    *unary("diopiTan", "tan.default", "tan_.default", values=Values("uniform", -1.2, 1.2)),
    *unary("diopiAsin", "asin.default", "asin_.default", values=UNIT),
    *unary("diopiAcos", "acos.default", "acos_.default", values=UNIT),
    *unary("diopiAtan", "atan.default", "atan_.default"),
    *binary("diopiAtan2", "atan2.default", "atan2_.default"),
    *unary("diopiSinh", "sinh.default", "sinh_.default"),
    *unary("diopiCosh", "cosh.default", "cosh_.default"),
    *unary("diopiAsinh", "asinh.default", "asinh_.default"),
    *unary("diopiAcosh", "acosh.default", "acosh_.default", values=Values("uniform", 1.0, 6.0)),
    *unary("diopiAtanh", "atanh.default", "atanh_.default", values=UNIT),
    # special functions
    *unary("diopiErf", "erf.default", "erf_.default"),
    *unary("diopiErfc", "erfc.default", "erfc_.default"),
    *unary("diopiErfinv", "erfinv.default", "erfinv_.default", values=UNIT),
    *unary("diopiLgamma", "lgamma.default", "lgamma_.default", values=Values("uniform", 0.1, 8)),
    *unary("diopiDigamma", "digamma.default", "digamma_.default", values=Values("uniform", 0.1, 8)),
    Config("diopiPolygamma", op="polygamma.default", inputs={"self": Input()},
           shapes=[((0,),), ((4, 5),), ((32, 48),)], dtypes=NO_HALF, values=Values("uniform", 0.5, 6),
           params={"n": [0, 1, 2]}),
    Config("diopiPolygamma", op="polygamma_.default", inputs={"self": Input()}, shapes=[((5, 6),)],
           dtypes=(torch.float32,), values=Values("uniform", 0.5, 6), params={"n": [1, 3]}),
    Config("diopiMvlgamma", op="mvlgamma.default", inputs={"self": Input()},
           shapes=[((0,),), ((4, 5),), ((32, 48),)], dtypes=F32_64, values=Values("uniform", 2.0, 8.0),
           params={"p": [1, 3]}),
    Config("diopiMvlgamma", op="mvlgamma_.default", inputs={"self": Input()}, shapes=[((5, 6),)],
           dtypes=F32_64, values=Values("uniform", 2.0, 8.0), params={"p": [2]}),
    *unary("diopiI0", "i0.default", "i0_.default", values=Values("uniform", -6, 6)),
    *unary("diopiSpecialI0e", "special_i0e.default", values=Values("uniform", -8, 8), dtypes=NO_HALF),
    *unary("diopiSpecialI1", "special_i1.default", values=Values("uniform", -6, 6), dtypes=F32_64),
    *unary("diopiSpecialI1e", "special_i1e.default", values=Values("uniform", -8, 8), dtypes=F32_64),
    *unary("diopiSpecialErfcx", "special_erfcx.default", values=Values("uniform", -3, 8), dtypes=F32_64),
    *unary("diopiSpecialNdtri", "special_ndtri.default", values=Values("uniform", 0.01, 0.99), dtypes=F32_64),
    *unary("diopiSpecialLogNdtr", "special_log_ndtr.default", values=Values("uniform", -6, 4), dtypes=F32_64),
    *unary("diopiSpecialEntr", "special_entr.default", values=Values("uniform", 0.0, 3.0)),
    *binary("diopiSpecialZeta", "special_zeta.default", values=Values("uniform", 1.5, 5), other=POSITIVE,
            dtypes=F32_64),
    *binary("diopiIgamma", "igamma.default", "igamma_.default", values=POSITIVE, other=POSITIVE, dtypes=NO_HALF),
    *binary("diopiIgammac", "igammac.default", "igammac_.default", values=POSITIVE, other=POSITIVE,
            dtypes=NO_HALF),
    *unary("diopiSinc", "sinc.default", "sinc_.default", values=Values("uniform", -4, 4)),
    *binary("diopiHypot", "hypot.default", "hypot_.default"),
    *binary("diopiLogAddExp", "logaddexp.default", values=Values("uniform", -10, 10)),
    *binary("diopiLogAddExp2", "logaddexp2.default", values=Values("uniform", -10, 10)),
    *binary("diopiXlogy", "xlogy.Tensor", "xlogy_.Tensor", other=POSITIVE),
    Config("diopiXlogy", op="xlogy.Scalar_Other", inputs={"self": Input()}, shapes=[((4, 5),), ((0,),)],
           dtypes=FLOAT32_16, params={"other": [0.5, 3.0]}),
    *binary("diopiXlog1py", "special_xlog1py.default", other=Values("uniform", -0.9, 4)),
    *binary("diopiCopysign", "copysign.Tensor", "copysign_.Tensor", other=SPECIAL),
    with_scalar("diopiCopysign", "copysign.Scalar", [-1.0, 2.0]),
    *binary("diopiNextafter", "nextafter.default", "nextafter_.default", dtypes=F32_64 + (torch.bfloat16,)),
    Config("diopiHeaviside", op="heaviside.default", inputs={"self": Input(), "values": Input()},
           shapes=list(BINARY_SHAPES), values=Values("integer", -2, 3), dtypes=F32_64 + I64,
           note="integer-valued inputs so that zeros (where the values tensor is taken) occur"),
    Config("diopiHeaviside", op="heaviside_.default", inputs={"self": Input(), "values": Input()},
           shapes=list(INPLACE_BINARY_SHAPES), values=Values("integer", -2, 3), dtypes=(torch.float32,)),
    Config("diopiLdexp", op="ldexp.Tensor", inputs={"self": Input(), "other": Input(torch.int32, SMALL_INT)},
           shapes=list(BINARY_SHAPES), dtypes=FLOAT3),
    Config("diopiLdexp", op="ldexp_.default",
           inputs={"self": Input(), "other": Input(torch.int32, Values("integer", -8, 8))},
           shapes=list(INPLACE_BINARY_SHAPES), dtypes=F32_64),
    *unary("diopiFrexp", "frexp.Tensor", values=SPECIAL, dtypes=NO_HALF + (torch.float16,)),
    *unary("diopiDeg2Rad", "deg2rad.default", "deg2rad_.default", values=Values("uniform", -360, 360)),
    *unary("diopiRad2Deg", "rad2deg.default", "rad2deg_.default", values=Values("uniform", -7, 7)),
    *unary("diopiAngle", "angle.default", values=SPECIAL, dtypes=FLOAT32_16 + (torch.float64,)),
    *binary("diopiFloorDivide", "floor_divide.default", "floor_divide_.Tensor", values=Values("uniform", -20, 20),
            other=Values("uniform", 1.0, 4.0), dtypes=F32_64 + I64),
    with_scalar("diopiFloorDivide", "floor_divide.Scalar", [3, -2], values=Values("uniform", -20, 20),
                dtypes=F32_64),
    # rounding
    *unary("diopiFloor", "floor.default", "floor_.default", values=Values("uniform", -10, 10)),
    *unary("diopiCeil", "ceil.default", "ceil_.default", values=Values("uniform", -10, 10)),
    *unary("diopiRound", "round.default", "round_.default", values=Values("uniform", -10, 10)),
    Config("diopiRound", op="round.decimals", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((32, 48),)],
           dtypes=F32_64, values=Values("uniform", -100, 100), params={"decimals": [1, 2, -1]}),
    *unary("diopiTrunc", "trunc.default", "trunc_.default", values=Values("uniform", -10, 10)),
    *unary("diopiFrac", "frac.default", "frac_.default", values=Values("uniform", -10, 10)),
    # clamp, maximum, minimum, nan_to_num
    Config("diopiClamp", op="clamp.default", inputs={"self": Input()}, shapes=list(UNARY_SHAPES),
           dtypes=FLOAT32_16, values=SPECIAL, params={"min": [-0.5, None], "max": [0.5]}),
    Config("diopiClamp", op="clamp.Tensor", inputs={"self": Input(), "min": Input(), "max": Input()},
           shapes=list(TERNARY_SHAPES), dtypes=FLOAT32_16 + INT, note="tensor bounds, broadcast"),
    Config("diopiClamp", op="clamp_.default", inputs={"self": Input()}, shapes=list(INPLACE_SHAPES),
           dtypes=F32_BF16, params={"min": [-1.0], "max": [None, 1.0]}),
    Config("diopiClamp", op="clamp_min.default", inputs={"self": Input()}, shapes=list(UNARY_SHAPES),
           dtypes=FLOAT32_16, values=SPECIAL, params={"min": [0.0]}),
    Config("diopiClamp", op="clamp_max_.default", inputs={"self": Input()}, shapes=list(INPLACE_SHAPES),
           dtypes=FLOAT32_16, params={"max": [0.25]}),
    *binary("diopiMaximum", "maximum.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    *binary("diopiMaximum", "fmax.default", values=SPECIAL, dtypes=FLOAT32_16),
    *binary("diopiMinimum", "minimum.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    *binary("diopiMinimum", "fmin.default", values=SPECIAL, dtypes=FLOAT32_16),
    *unary("diopiNanToNum", "nan_to_num.default", "nan_to_num_.default", values=SPECIAL,
           params={"nan": [None, 1.5], "posinf": [None, 100.0], "neginf": [-100.0]}),
    # comparison
    *binary("diopiEq", "eq.Tensor", "eq_.Tensor", values=Values("integer", -2, 3), dtypes=FLOAT3 + I64),
    with_scalar("diopiEq", "eq.Scalar", [0, 1.0], values=Values("integer", -2, 3)),
    *binary("diopiNe", "ne.Tensor", "ne_.Tensor", values=Values("integer", -2, 3), dtypes=FLOAT3 + I64),
    with_scalar("diopiNe", "ne.Scalar", [0], values=SPECIAL),
    *binary("diopiLt", "lt.Tensor", "lt_.Tensor", values=SPECIAL, dtypes=FLOAT3 + I64),
    with_scalar("diopiLt", "lt.Scalar", [0, 0.5], values=SPECIAL),
    *binary("diopiLe", "le.Tensor", "le_.Tensor", values=SPECIAL, dtypes=FLOAT3 + I64),
    with_scalar("diopiLe", "le.Scalar", [0], values=Values("integer", -2, 3)),
    *binary("diopiGt", "gt.Tensor", "gt_.Tensor", values=SPECIAL, dtypes=FLOAT3 + I64),
    with_scalar("diopiGt", "gt.Scalar", [0, -1.5], values=SPECIAL),
    *binary("diopiGe", "ge.Tensor", "ge_.Tensor", values=SPECIAL, dtypes=FLOAT3 + I64),
    with_scalar("diopiGe", "ge.Scalar", [0], values=Values("integer", -2, 3)),
    # logic and bits
    *binary("diopiLogicalAnd", "logical_and.default", "logical_and_.default", values=Values("integer", -1, 2),
            dtypes=BOOL + FLOAT32_16 + INT),
    *binary("diopiLogicalOr", "logical_or.default", "logical_or_.default", values=Values("integer", -1, 2),
            dtypes=BOOL + FLOAT32_16 + INT),
    *binary("diopiLogicalXor", "logical_xor.default", "logical_xor_.default", values=Values("integer", -1, 2),
            dtypes=BOOL + FLOAT32_16 + INT),
    *unary("diopiLogicalNot", "logical_not.default", "logical_not_.default", values=SPECIAL,
           dtypes=BOOL + FLOAT32_16 + INT),
    *binary("diopiBitwiseAnd", "bitwise_and.Tensor", "bitwise_and_.Tensor", values=Values("integer", -100, 100),
            dtypes=INT + BOOL + (torch.uint8,)),
    *binary("diopiBitwiseOr", "bitwise_or.Tensor", "bitwise_or_.Tensor", values=Values("integer", -100, 100),
            dtypes=INT + BOOL + (torch.uint8,)),
    *binary("diopiBitwiseXor", "bitwise_xor.Tensor", "bitwise_xor_.Tensor", values=Values("integer", -100, 100),
            dtypes=INT + BOOL + (torch.uint8,)),
    with_scalar("diopiBitwiseXor", "bitwise_xor.Scalar", [5, -1], values=Values("integer", -100, 100), dtypes=INT),
    *unary("diopiBitwiseNot", "bitwise_not.default", "bitwise_not_.default", values=Values("integer", -100, 100),
           dtypes=INT + BOOL + (torch.uint8,)),
    *binary("diopiBitwiseLeftShift", "bitwise_left_shift.Tensor", "bitwise_left_shift_.Tensor",
            values=Values("integer", -1000, 1000), other=Values("integer", 0, 8), dtypes=INT + (torch.uint8,)),
    with_scalar("diopiBitwiseLeftShift", "__lshift__.Scalar", [1, 3], values=Values("integer", -1000, 1000),
                dtypes=INT),
    *binary("diopiBitwiseRightShift", "bitwise_right_shift.Tensor", "bitwise_right_shift_.Tensor",
            values=Values("integer", -1000, 1000), other=Values("integer", 0, 8), dtypes=INT + (torch.uint8,)),
    with_scalar("diopiBitwiseRightShift", "__rshift__.Scalar", [1, 3], values=Values("integer", -1000, 1000),
                dtypes=INT),
    *binary("diopiGcd", "gcd.default", "gcd_.default", values=Values("integer", -60, 60), dtypes=INT),
    *binary("diopiLcm", "lcm.default", "lcm_.default", values=Values("integer", -30, 30), dtypes=INT),
    # classification
    *unary("diopiIsNan", "isnan.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    *unary("diopiIsInf", "isinf.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    *unary("diopiIsPosInf", "isposinf.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    *unary("diopiIsNegInf", "isneginf.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    *unary("diopiSignbit", "signbit.default", values=SPECIAL, dtypes=FLOAT3 + I64),
    # fused multiply-add family
    Config("diopiAddcmul", op="addcmul.default", inputs={"self": Input(), "tensor1": Input(), "tensor2": Input()},
           shapes=list(TERNARY_SHAPES), dtypes=FLOAT3, params={"value": [-0.5]}),
    Config("diopiAddcmul", op="addcmul_.default", inputs={"self": Input(), "tensor1": Input(), "tensor2": Input()},
           shapes=[((5, 6), (5, 6), (6,)), ((16, 40), (16, 40), (16, 40))], dtypes=F32_BF16,
           params={"value": [2]}),
    Config("diopiAddcdiv", op="addcdiv.default", inputs={"self": Input(), "tensor1": Input(),
                                                        "tensor2": Input(values=Values("uniform", 0.5, 3))},
           shapes=list(TERNARY_SHAPES), dtypes=FLOAT3, params={"value": [-0.5]}),
    Config("diopiAddcdiv", op="addcdiv_.default", inputs={"self": Input(), "tensor1": Input(),
                                                         "tensor2": Input(values=Values("uniform", 0.5, 3))},
           shapes=[((5, 6), (5, 6), (6,)), ((16, 40), (16, 40), (16, 40))], dtypes=F32_BF16,
           params={"value": [0.1]}),
    Config("diopiLerp", op="lerp.Scalar", inputs={"self": Input(), "end": Input()},
           shapes=list(BINARY_SHAPES), dtypes=FLOAT3, params={"weight": [0.25]}),
    Config("diopiLerp", op="lerp.Tensor", inputs={"self": Input(), "end": Input(),
                                                 "weight": Input(values=Values("probability"))},
           shapes=list(TERNARY_SHAPES), dtypes=FLOAT3),
    Config("diopiLerp", op="lerp_.Scalar", inputs={"self": Input(), "end": Input()},
           shapes=list(INPLACE_BINARY_SHAPES), dtypes=F32_BF16, params={"weight": [0.5]}),
]
