"""Optimizer steps, foreach arithmetic and AMP."""

FAMILY = "optim"

# name | packets | tags | backward function | summary
TABLE = """
diopiForeachAdd | _foreach_add _foreach_add_ |
diopiForeachSub | _foreach_sub _foreach_sub_ |
diopiForeachMul | _foreach_mul _foreach_mul_ |
diopiForeachDiv | _foreach_div _foreach_div_ |
diopiForeachAddcmul | _foreach_addcmul _foreach_addcmul_ |
diopiForeachAddcdiv | _foreach_addcdiv _foreach_addcdiv_ |
diopiForeachLerp | _foreach_lerp _foreach_lerp_ |
diopiForeachSqrt | _foreach_sqrt _foreach_sqrt_ |
diopiForeachNorm | _foreach_norm |
diopiForeachZero | _foreach_zero_ |
diopiForeachCopy | _foreach_copy_ |
diopiForeachNeg | _foreach_neg _foreach_neg_ |
diopiForeachMaximum | _foreach_maximum _foreach_maximum_ |
diopiForeachPow | _foreach_pow _foreach_pow_ |
"""
