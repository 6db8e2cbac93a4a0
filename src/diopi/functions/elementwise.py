"""Elementwise arithmetic, comparison, logic and math functions."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "elementwise"

# name | packets | tags | backward function | summary
TABLE = """
diopiAdd | add add_ | | | out = input + alpha * other (tensor or scalar), broadcasting.
diopiSub | sub sub_ rsub | | | out = input - alpha * other; rsub swaps the operands.
diopiMul | mul mul_ | | | out = input * other, broadcasting.
diopiDiv | div div_ | | | out = input / other with optional rounding mode (trunc, floor).
diopiRemainder | remainder remainder_ fmod fmod_ | | | Python-style remainder (sign of divisor) and C-style fmod (sign of dividend).
diopiPow | pow pow_ | | | out = input ** exponent, tensor or scalar on either side.
diopiNeg | neg neg_ | | | out = -input.
diopiAbs | abs abs_ | | | Absolute value of input.
diopiSign | sign sign_ sgn sgn_ | | | out = -1, 0 or 1 by the sign of input.
diopiReciprocal | reciprocal reciprocal_ | | | out = 1 / input.
diopiSqrt | sqrt sqrt_ | | | out = sqrt(input).
diopiRsqrt | rsqrt rsqrt_ | | | out = 1 / sqrt(input).
diopiExp | exp exp_ | | | out = e ** input.
diopiExp2 | exp2 exp2_ | | | out = 2 ** input.
diopiExpm1 | expm1 expm1_ | | | out = e ** input - 1, accurate near 0.
diopiLog | log log_ | | | Natural logarithm.
diopiLog2 | log2 log2_ | | | Base-2 logarithm.
diopiLog10 | log10 log10_ | | | Base-10 logarithm.
diopiLog1p | log1p log1p_ | | | out = log(1 + input), accurate near 0.
diopiSin | sin sin_ | | | Sine.
diopiCos | cos cos_ | | | Cosine.
diopiTan | tan tan_ | | | Tangent.
diopiAsin | asin asin_ | | | Arcsine, input in [-1, 1].
diopiAcos | acos acos_ | | | Arccosine, input in [-1, 1].
diopiAtan | atan atan_ | | | Arctangent.
diopiAtan2 | atan2 atan2_ | | | Arctangent of input / other with the quadrant from both signs.
diopiSinh | sinh sinh_ | | | Hyperbolic sine.
diopiCosh | cosh cosh_ | | | Hyperbolic cosine.
diopiAsinh | asinh asinh_ | | | Inverse hyperbolic sine.
diopiAcosh | acosh acosh_ | | | Inverse hyperbolic cosine, input >= 1.
diopiAtanh | atanh atanh_ | | | Inverse hyperbolic tangent, input in (-1, 1).
diopiErf | erf erf_ | | | Gauss error function.
diopiErfc | erfc erfc_ | | | Complementary error function 1 - erf(input).
diopiErfinv | erfinv erfinv_ | | | Inverse error function, input in (-1, 1).
diopiLgamma | lgamma lgamma_ | | | Log of the absolute value of the gamma function.
diopiDigamma | digamma digamma_ | | | Derivative of lgamma.
diopiPolygamma | polygamma polygamma_ | | | N-th derivative of digamma.
diopiMvlgamma | mvlgamma mvlgamma_ | | | Multivariate log-gamma of dimension p.
diopiI0 | i0 i0_ | | | Modified Bessel function of the first kind, order 0.
diopiSpecialI0e | special_i0e | | | Exponentially scaled modified Bessel function i0.
diopiSpecialI1 | special_i1 | | | Modified Bessel function of the first kind, order 1.
diopiSpecialI1e | special_i1e | | | Exponentially scaled modified Bessel function i1.
diopiSpecialErfcx | special_erfcx | | | Scaled complementary error function exp(x**2) * erfc(x).
diopiSpecialNdtri | special_ndtri | | | Inverse of the standard normal CDF, input in (0, 1).
diopiSpecialLogNdtr | special_log_ndtr | | | Log of the standard normal CDF.
diopiSpecialEntr | special_entr | | | Elementwise entropy -x * log(x).
diopiSpecialZeta | special_zeta | | | Hurwitz zeta function.
diopiIgamma | igamma igamma_ | | | Regularized lower incomplete gamma function.
diopiIgammac | igammac igammac_ | | | Regularized upper incomplete gamma function.
diopiSinc | sinc sinc_ | | | Normalized sinc sin(pi x) / (pi x).
diopiHypot | hypot hypot_ | | | sqrt(input**2 + other**2) without overflow.
diopiLogAddExp | logaddexp | | | log(exp(input) + exp(other)), stable.
diopiLogAddExp2 | logaddexp2 | | | log2(2**input + 2**other), stable.
diopiXlogy | xlogy xlogy_ | | | input * log(other), 0 where input is 0.
diopiXlog1py | special_xlog1py | | | input * log1p(other), 0 where input is 0.
diopiCopysign | copysign copysign_ | | | Magnitude of input with the sign of other.
diopiNextafter | nextafter nextafter_ | | | Next representable value after input towards other.
diopiHeaviside | heaviside heaviside_ | | | Step function: 0 below 0, values at 0, 1 above.
diopiLdexp | ldexp ldexp_ | | | input * 2 ** other.
diopiFrexp | frexp | | | Mantissa in [0.5, 1) and integer exponent of input.
diopiDeg2Rad | deg2rad deg2rad_ | | | Degrees to radians.
diopiRad2Deg | rad2deg rad2deg_ | | | Radians to degrees.
diopiAngle | angle | | | Argument of input: 0 for non-negative reals, pi for negative, NaN kept.
diopiFloorDivide | floor_divide floor_divide_ | | | Input / other rounded down.
diopiFloor | floor floor_ | | | Round down.
diopiCeil | ceil ceil_ | | | Round up.
diopiRound | round round_ | | | Round half to even, optionally to a number of decimals.
diopiTrunc | trunc trunc_ | | | Round towards zero.
diopiFrac | frac frac_ | | | Fractional part input - trunc(input).
diopiClamp | clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_ | | | Clamp input into [min, max] (scalar or tensor bounds, either optional).
diopiMaximum | maximum fmax | | | Elementwise maximum; maximum propagates NaN, fmax ignores it.
diopiMinimum | minimum fmin | | | Elementwise minimum; minimum propagates NaN, fmin ignores it.
diopiNanToNum | nan_to_num nan_to_num_ | | | Replace NaN, +inf and -inf by finite values.
diopiEq | eq eq_ | | | input == other.
diopiNe | ne ne_ | | | Input != other.
diopiLt | lt lt_ | | | Input < other.
diopiLe | le le_ | | | Input <= other.
diopiGt | gt gt_ | | | Input > other.
diopiGe | ge ge_ | | | Input >= other.
diopiLogicalAnd | logical_and logical_and_ | | | Logical and of truth values.
diopiLogicalOr | logical_or logical_or_ | | | Logical or of truth values.
diopiLogicalXor | logical_xor logical_xor_ | | | Logical exclusive or of truth values.
diopiLogicalNot | logical_not logical_not_ | | | Logical negation.
diopiBitwiseAnd | bitwise_and bitwise_and_ | | | Bitwise and of integer or bool tensors.
diopiBitwiseOr | bitwise_or bitwise_or_ | | | Bitwise or of integer or bool tensors.
diopiBitwiseXor | bitwise_xor bitwise_xor_ | | | Bitwise exclusive or of integer or bool tensors.
diopiBitwiseNot | bitwise_not bitwise_not_ | | | Bitwise negation.
diopiBitwiseLeftShift | bitwise_left_shift bitwise_left_shift_ __lshift__ __ilshift__ | | | Integer left shift (the << operator).
diopiBitwiseRightShift | bitwise_right_shift bitwise_right_shift_ __rshift__ __irshift__ | | | Arithmetic right shift (the >> operator).
diopiGcd | gcd gcd_ | | | Greatest common divisor of integers.
diopiLcm | lcm lcm_ | | | Least common multiple of integers.
diopiIsNan | isnan | | | Whether input is NaN.
diopiIsInf | isinf | | | Whether input is +inf or -inf.
diopiIsPosInf | isposinf | | | Whether input is +inf.
diopiIsNegInf | isneginf | | | Whether input is -inf.
diopiSignbit | signbit | | | Whether the sign bit of input is set (true for -0.0).
diopiAddcmul | addcmul addcmul_ | | | out = input + value * tensor1 * tensor2.
diopiAddcdiv | addcdiv addcdiv_ | | | out = input + value * tensor1 / tensor2.
diopiLerp | lerp lerp_ | | | Linear interpolation input + weight * (end - input).
"""
