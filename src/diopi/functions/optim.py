"""Optimizer steps, foreach arithmetic and AMP."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "optim"

# name | packets | tags | backward function | summary
TABLE = """
diopiFusedAdam | _fused_adam_ | | | One fused Adam step over lists of params, grads and moments (optim.Adam fused=True).
diopiFusedAdamW | _fused_adamw_ | | | One fused AdamW step, decoupled weight decay (optim.AdamW fused=True).
diopiFusedSgd | _fused_sgd_ | | | One fused SGD step with momentum, dampening, Nesterov (optim.SGD fused=True).
diopiFusedAdagrad | _fused_adagrad_ | | | One fused Adagrad step (optim.Adagrad fused=True).
diopiAmpForeachNonFiniteCheckAndUnscale | _amp_foreach_non_finite_check_and_unscale_ | | | AMP: multiply grads by inv_scale in place and flag any inf/NaN.
diopiAmpUpdateScale | _amp_update_scale_ | | | AMP: grow or back off the loss scale from the found-inf flag.
diopiForeachAdd | _foreach_add _foreach_add_ | | | Per-tensor add over lists (scalar, scalar list, tensor or list operand).
diopiForeachSub | _foreach_sub _foreach_sub_ | | | Per-tensor subtract over lists.
diopiForeachMul | _foreach_mul _foreach_mul_ | | | Per-tensor multiply over lists.
diopiForeachDiv | _foreach_div _foreach_div_ | | | Per-tensor divide over lists.
diopiForeachAddcmul | _foreach_addcmul _foreach_addcmul_ | | | Per-tensor self + value * t1 * t2 over lists.
diopiForeachAddcdiv | _foreach_addcdiv _foreach_addcdiv_ | | | Per-tensor self + value * t1 / t2 over lists.
diopiForeachLerp | _foreach_lerp _foreach_lerp_ | | | Per-tensor linear interpolation over lists.
diopiForeachSqrt | _foreach_sqrt _foreach_sqrt_ | | | Per-tensor square root over a list.
diopiForeachNorm | _foreach_norm | | | The p-norm of each tensor of a list (gradient clipping).
diopiForeachZero | _foreach_zero_ | | | Zero every tensor of a list in place.
diopiForeachCopy | _foreach_copy_ | | | Copy a list of tensors into another in place.
diopiForeachNeg | _foreach_neg _foreach_neg_ | | | Per-tensor negation over a list.
diopiForeachMaximum | _foreach_maximum _foreach_maximum_ | | | Per-tensor elementwise maximum over lists.
diopiForeachMinimum | _foreach_minimum _foreach_minimum_ | | | Per-tensor elementwise minimum over lists.
diopiForeachPow | _foreach_pow _foreach_pow_ | | | Per-tensor power over lists.
diopiForeachClampMin | _foreach_clamp_min _foreach_clamp_min_ | | | Per-tensor lower clamp over lists (clip_grad_value_).
diopiForeachClampMax | _foreach_clamp_max _foreach_clamp_max_ | | | Per-tensor upper clamp over lists (clip_grad_value_).
diopiForeachMax | _foreach_max | | | The maximum of each tensor of a list (infinity-norm clipping).
diopiForeachAbs | _foreach_abs _foreach_abs_ | | | Per-tensor absolute value over a list (Adamax).
diopiForeachSign | _foreach_sign _foreach_sign_ | | | Per-tensor sign over a list (Rprop).
diopiForeachReciprocal | _foreach_reciprocal _foreach_reciprocal_ | | | Per-tensor reciprocal over a list.
diopiForeachRsqrt | _foreach_rsqrt _foreach_rsqrt_ | | | Per-tensor reciprocal square root over a list.
diopiForeachExp | _foreach_exp _foreach_exp_ | | | Per-tensor exponential over a list.
diopiForeachExpm1 | _foreach_expm1 _foreach_expm1_ | | | Per-tensor exp(x) - 1 over a list.
diopiForeachLog | _foreach_log _foreach_log_ | | | Per-tensor natural logarithm over a list.
diopiForeachLog1p | _foreach_log1p _foreach_log1p_ | | | Per-tensor log(1 + x) over a list.
diopiForeachLog2 | _foreach_log2 _foreach_log2_ | | | Per-tensor base-2 logarithm over a list.
diopiForeachLog10 | _foreach_log10 _foreach_log10_ | | | Per-tensor base-10 logarithm over a list.
diopiForeachSigmoid | _foreach_sigmoid _foreach_sigmoid_ | | | Per-tensor sigmoid over a list.
diopiForeachTanh | _foreach_tanh _foreach_tanh_ | | | Per-tensor tanh over a list.
diopiForeachSin | _foreach_sin _foreach_sin_ | | | Per-tensor sine over a list.
diopiForeachCos | _foreach_cos _foreach_cos_ | | | Per-tensor cosine over a list.
diopiForeachErf | _foreach_erf _foreach_erf_ | | | Per-tensor error function over a list.
diopiForeachFloor | _foreach_floor _foreach_floor_ | | | Per-tensor floor over a list.
diopiForeachCeil | _foreach_ceil _foreach_ceil_ | | | Per-tensor ceil over a list.
diopiForeachRound | _foreach_round _foreach_round_ | | | Per-tensor round half to even over a list.
diopiForeachTrunc | _foreach_trunc _foreach_trunc_ | | | Per-tensor truncation toward zero over a list.
diopiForeachFrac | _foreach_frac _foreach_frac_ | | | Per-tensor fractional part over a list.
"""
