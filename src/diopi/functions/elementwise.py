"""Elementwise arithmetic, comparison, logic and math functions."""

FAMILY = "elementwise"

# name | packets | tags | backward function | summary
TABLE = """
diopiAdd | add add_ |
diopiSub | sub sub_ rsub |
diopiMul | mul mul_ |
diopiDiv | div div_ |
diopiRemainder | remainder remainder_ fmod fmod_ |
diopiPow | pow pow_ |
diopiNeg | neg neg_ |
diopiAbs | abs abs_ |
diopiSign | sign sign_ sgn |
diopiReciprocal | reciprocal reciprocal_ |
diopiSqrt | sqrt sqrt_ |
diopiRsqrt | rsqrt rsqrt_ |
diopiExp | exp exp_ |
diopiExp2 | exp2 exp2_ |
diopiExpm1 | expm1 expm1_ |
diopiLog | log log_ |
diopiLog2 | log2 log2_ |
diopiLog10 | log10 log10_ |
diopiLog1p | log1p log1p_ |
diopiSin | sin sin_ |
diopiCos | cos cos_ |
diopiTan | tan tan_ |
diopiAsin | asin asin_ |
diopiAcos | acos acos_ |
diopiAtan | atan atan_ |
diopiAtan2 | atan2 atan2_ |
diopiSinh | sinh sinh_ |
diopiCosh | cosh cosh_ |
diopiErf | erf erf_ |
diopiErfinv | erfinv erfinv_ |
diopiFloor | floor floor_ |
diopiCeil | ceil ceil_ |
diopiRound | round round_ |
diopiTrunc | trunc trunc_ |
diopiFrac | frac frac_ |
diopiClamp | clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_ |
diopiMaximum | maximum fmax |
diopiMinimum | minimum fmin |
diopiEq | eq eq_ |
diopiNe | ne ne_ |
diopiLt | lt lt_ |
diopiLe | le le_ |
diopiGt | gt gt_ |
diopiGe | ge ge_ |
diopiLogicalAnd | logical_and logical_and_ |
diopiLogicalOr | logical_or logical_or_ |
diopiLogicalNot | logical_not logical_not_ |
diopiBitwiseAnd | bitwise_and bitwise_and_ |
diopiBitwiseOr | bitwise_or bitwise_or_ |
diopiBitwiseNot | bitwise_not bitwise_not_ |
diopiIsNan | isnan |
diopiIsInf | isinf |
diopiAddcmul | addcmul addcmul_ |
diopiAddcdiv | addcdiv addcdiv_ |
diopiLerp | lerp lerp_ |
"""
