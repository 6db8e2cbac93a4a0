"""Conformance cases of the optim family: fused optimizer steps, AMP scaling and ``_foreach_*`` list arithmetic.

Tensor lists hold three tensors of different shapes (one of them empty), one 0-dim tensor each, or three
larger ones; every out-of-place overload is also run in place where one exists. Optimizer states that must be
non-negative (second moments, Adagrad sums) and step counts (integers >= 1) are drawn so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from diopi.conformance.spec import FLOAT, Config, Input, Values

F32 = (torch.float32,)
OPTIM_DTYPES = (torch.float32, torch.bfloat16, torch.float64)
#: float16 is left to the elementwise family's own functions: a foreach kernel loops the same per-dtype code.
FOREACH_DTYPES = (torch.float32, torch.bfloat16, torch.float64)
#: One shape entry per list input: three different shapes, three 0-dim tensors, three larger ones.
LISTS = [[(5,), (3, 4), (0,)], (), (32, 64)]
NONEMPTY = [[(5,), (3, 4), (1,)], (), (32, 64)]
POSITIVE = Values("positive", 0.1, 4.0)
HERE = "diopi.conformance.configs.optim"
#: Foreach lists: contiguous and strided tensors (an offset view adds nothing a strided one does not test).
TWO_LAYOUTS = ("contiguous", "noncontiguous")
CONTIGUOUS = ("contiguous", "offset")
SGD_DTYPES = (torch.float32, torch.float64)
SGD_NOTE = ("float32/float64 contiguous only: PyTorch's CPU _fused_sgd_ with momentum computes wrong momentum buffers "
            "in bfloat16/float16 beyond a few elements, and wrong values for strided tensors (torch 2.13)")
CONTIGUOUS_NOTE = ("contiguous tensors only: PyTorch's CPU fused optimizers silently compute wrong values for strided "
                   "parameters or states (torch 2.13)")


def _lst(values: Values | None = None, dtype: torch.dtype | None = None) -> Input:
    return Input(values=values, dtype=dtype, list_of=3)


def _foreach(function: str, op: str, inputs: dict[str, Input], params: dict | None = None,
             inplace: str | None = None, lists: list | None = None, dtypes: tuple = FOREACH_DTYPES,
             note: str = "") -> Config:
    """A ``_foreach_*`` overload over :data:`LISTS` (the same shape entry for every list input)."""
    return Config(function, op=op, inputs=inputs, shapes=[(entry,) * len(inputs) for entry in (lists or LISTS)],
                  params=dict(params or {}), inplace=inplace, dtypes=dtypes, note=note, layouts=TWO_LAYOUTS)


def _unary(function: str, name: str, values: Values | None = None, lists: list | None = None) -> Config:
    return _foreach(function, f"_foreach_{name}.default", {"self": _lst(values)}, inplace=f"_foreach_{name}_.default",
                    lists=lists)


def _binary(function: str, name: str, values: Values | None = None, *, other: Values | None = None,
            list_params: dict | None = None, scalar: Sequence = (0.5, -1.0), scalars: Sequence = (0.25, -0.5, 2.0)
            ) -> list[Config]:
    """The List (``other`` values, default ``values``), Scalar and ScalarList overloads of a binary
    ``_foreach_*`` function, each also in place."""
    return [
        _foreach(function, f"_foreach_{name}.List", {"self": _lst(values), "other": _lst(other or values)},
                 list_params, inplace=f"_foreach_{name}_.List"),
        _foreach(function, f"_foreach_{name}.Scalar", {"self": _lst(values)}, {"scalar": list(scalar)},
                 inplace=f"_foreach_{name}_.Scalar"),
        _foreach(function, f"_foreach_{name}.ScalarList", {"self": _lst(values)}, {"scalars": [list(scalars)]},
                 inplace=f"_foreach_{name}_.ScalarList"),
    ]


def fused_adam(op: str, self: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
               exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor], **options: object) -> None:
    """One fused Adam/AdamW step without AMSGrad: ``max_exp_avg_sqs`` must then be an empty list."""
    getattr(torch.ops.aten, op)(self, grads, exp_avgs, exp_avg_sqs, [], state_steps, amsgrad=False, **options)


def _adam(function: str, packet: str) -> list[Config]:
    states = {"self": _lst(), "grads": _lst(), "exp_avgs": _lst(), "exp_avg_sqs": _lst(POSITIVE)}
    steps = {"state_steps": Input(dtype=torch.float32, list_of=3, values=Values("integer", 1, 10))}
    shapes = [([(5,), (3, 4), (0,)],) * 4 + ((),), ((32, 64),) * 4 + ((),)]
    base = {"lr": [1e-3], "beta1": [0.9], "beta2": [0.999], "eps": [1e-8], "maximize": [False]}
    return [
        Config(function, op=f"{packet}.default", inputs={**states, "max_exp_avg_sqs": _lst(POSITIVE), **steps},
               shapes=[s[:4] + (s[3],) + s[4:] for s in shapes], dtypes=OPTIM_DTYPES, layouts=CONTIGUOUS,
               params={**base, "weight_decay": [0.0, 0.01], "amsgrad": [True]}, note=CONTIGUOUS_NOTE),
        Config(function, call=f"{HERE}.fused_adam", inputs={**states, **steps}, shapes=shapes, dtypes=OPTIM_DTYPES,
               layouts=CONTIGUOUS, params={"op": [packet], **base, "weight_decay": [0.0, 0.01]},
               note="without AMSGrad (max_exp_avg_sqs empty); " + CONTIGUOUS_NOTE),
        Config(function, call=f"{HERE}.fused_adam", inputs={**states, **steps}, shapes=shapes[:1], dtypes=OPTIM_DTYPES,
               layouts=CONTIGUOUS, params={"op": [packet], **base, "lr": [0.1], "weight_decay": [0.1],
                                           "maximize": [True]}, note=CONTIGUOUS_NOTE),
        Config(function, call=f"{HERE}.fused_adam",
               inputs={**states, **steps, "grad_scale": Input(dtype=torch.float32, values=POSITIVE),
                       "found_inf": Input(dtype=torch.float32, values=Values("uniform", 0, 0))},
               shapes=[s + ((), ()) for s in shapes], dtypes=(torch.float32,), layouts=CONTIGUOUS,
               params={"op": [packet], **base, "weight_decay": [0.0]},
               note="AMP: gradients unscaled by grad_scale inside the step; found_inf 0 lets the step happen"),
    ]


CONFIGS: list[Config] = [
    *_adam("diopiFusedAdam", "_fused_adam_"),
    *_adam("diopiFusedAdamW", "_fused_adamw_"),
    Config("diopiFusedSgd", op="_fused_sgd_.default",
           inputs={"self": _lst(), "grads": _lst(), "momentum_buffer_list": _lst()},
           shapes=[([(5,), (3, 4), (0,)],) * 3, ((32, 64),) * 3], dtypes=SGD_DTYPES, layouts=CONTIGUOUS,
           note=SGD_NOTE, params={"weight_decay": [0.0, 1e-4], "momentum": [0.9], "lr": [0.1], "dampening": [0.0],
                                  "nesterov": [False, True], "maximize": [False], "is_first_step": [False, True]}),
    Config("diopiFusedSgd", op="_fused_sgd_.default",
           inputs={"self": _lst(), "grads": _lst(), "momentum_buffer_list": _lst()},
           shapes=[([(5,), (3, 4), (2,)],) * 3], dtypes=SGD_DTYPES, layouts=CONTIGUOUS, note=SGD_NOTE,
           params={"weight_decay": [0.0], "momentum": [0.5], "lr": [0.01], "dampening": [0.1], "nesterov": [False],
                   "maximize": [True], "is_first_step": [False]}),
    Config("diopiFusedAdagrad", op="_fused_adagrad_.default",
           inputs={"self": _lst(), "grads": _lst(), "state_sums": _lst(POSITIVE),
                   "state_steps": Input(dtype=torch.float32, list_of=3, values=Values("integer", 1, 10))},
           shapes=[([(5,), (3, 4), (0,)],) * 3 + ((),), ((32, 64),) * 3 + ((),)], dtypes=OPTIM_DTYPES,
           layouts=CONTIGUOUS, note=CONTIGUOUS_NOTE,
           params={"lr": [0.01], "lr_decay": [0.0, 0.1], "weight_decay": [0.0, 0.01], "eps": [1e-10],
                   "maximize": [False]}),
    Config("diopiAmpForeachNonFiniteCheckAndUnscale", op="_amp_foreach_non_finite_check_and_unscale_.default",
           inputs={"self": _lst(), "found_inf": Input(dtype=torch.float32, values=Values("uniform", 0, 0)),
                   "inv_scale": Input(dtype=torch.float32, values=Values("uniform", 0.5, 0.5))},
           shapes=[(entry, (1,), (1,)) for entry in LISTS], dtypes=FLOAT, note="finite gradients: found_inf stays 0"),
    Config("diopiAmpForeachNonFiniteCheckAndUnscale", op="_amp_foreach_non_finite_check_and_unscale_.default",
           inputs={"self": _lst(Values("special")),
                   "found_inf": Input(dtype=torch.float32, values=Values("uniform", 0, 0)),
                   "inv_scale": Input(dtype=torch.float32, values=Values("uniform", 2 ** -10, 2 ** -10))},
           shapes=[([(6,), (3, 4), (16,)], (1,), (1,)), ((32, 64), (1,), (1,))], dtypes=FLOAT,
           note="inf and NaN among the gradients: found_inf becomes 1"),
    Config("diopiAmpUpdateScale", op="_amp_update_scale_.default",
           inputs={"self": Input(dtype=torch.float32, values=Values("uniform", 1024.0, 65536.0)),
                   "growth_tracker": Input(dtype=torch.int32, values=Values("integer", 0, 3)),
                   "found_inf": Input(dtype=torch.float32, values=Values("integer", 0, 2))},
           shapes=[((1,), (1,), (1,))], dtypes=F32, layouts=("contiguous", "offset"),
           params={"scale_growth_factor": [2.0], "scale_backoff_factor": [0.5, 0.125], "growth_interval": [1, 3, 2000]},
           note="found_inf 0 or 1: growth after growth_interval clean steps, or back-off"),
    *_binary("diopiForeachAdd", "add", list_params={"alpha": [1, -0.5]}, scalar=[1.5], scalars=[1.0, -2.0, 0.5]),
    _foreach("diopiForeachAdd", "_foreach_add.Scalar", {"self": _lst()}, {"scalar": [3]}, dtypes=(torch.int64,),
             lists=LISTS[:1], note="integer lists"),
    *_binary("diopiForeachSub", "sub", list_params={"alpha": [1, 2]}, scalar=[0.5], scalars=[1.0, -2.0, 0.5]),
    *_binary("diopiForeachMul", "mul", scalar=[0.9, -2.0], scalars=[0.5, 2.0, -1.0]),
    Config("diopiForeachMul", op="_foreach_mul.Tensor", inputs={"self": _lst(), "other": Input()},
           shapes=[(entry, ()) for entry in LISTS], inplace="_foreach_mul_.Tensor",
           note="one 0-dim tensor factor (clip_grad_norm_'s clip coefficient)"),
    *_binary("diopiForeachDiv", "div", other=POSITIVE, scalar=[0.9, -4.0], scalars=[0.5, 2.0, -1.0]),
    Config("diopiForeachDiv", op="_foreach_div.Tensor", inputs={"self": _lst(), "other": Input(values=POSITIVE)},
           shapes=[(entry, ()) for entry in LISTS], inplace="_foreach_div_.Tensor"),
    _foreach("diopiForeachAddcmul", "_foreach_addcmul.Scalar", {"self": _lst(), "tensor1": _lst(), "tensor2": _lst()},
             {"value": [1, -0.001]}, inplace="_foreach_addcmul_.Scalar"),
    _foreach("diopiForeachAddcmul", "_foreach_addcmul.ScalarList",
             {"self": _lst(), "tensor1": _lst(), "tensor2": _lst()}, {"scalars": [[0.1, -1.0, 2.0]]},
             inplace="_foreach_addcmul_.ScalarList"),
    _foreach("diopiForeachAddcdiv", "_foreach_addcdiv.Scalar",
             {"self": _lst(), "tensor1": _lst(), "tensor2": _lst(POSITIVE)}, {"value": [1, -0.001]},
             inplace="_foreach_addcdiv_.Scalar"),
    _foreach("diopiForeachAddcdiv", "_foreach_addcdiv.ScalarList",
             {"self": _lst(), "tensor1": _lst(), "tensor2": _lst(POSITIVE)}, {"scalars": [[0.1, -1.0, 2.0]]},
             inplace="_foreach_addcdiv_.ScalarList"),
    _foreach("diopiForeachLerp", "_foreach_lerp.List", {"self": _lst(), "tensors1": _lst(),
                                                        "weights": _lst(Values("probability"))},
             inplace="_foreach_lerp_.List"),
    _foreach("diopiForeachLerp", "_foreach_lerp.Scalar", {"self": _lst(), "tensors1": _lst()},
             {"weight": [0.1, 0.9]}, inplace="_foreach_lerp_.Scalar"),
    _unary("diopiForeachSqrt", "sqrt", POSITIVE),
    _foreach("diopiForeachNorm", "_foreach_norm.Scalar", {"self": _lst()}, {"ord": [2, 1]}),
    _foreach("diopiForeachNorm", "_foreach_norm.Scalar", {"self": _lst()}, {"ord": [math.inf]}, lists=NONEMPTY,
             note="the infinity norm of an empty tensor is undefined"),
    _foreach("diopiForeachNorm", "_foreach_norm.Scalar", {"self": _lst()}, {"ord": [2], "dtype": [torch.float32]},
             dtypes=(torch.bfloat16, torch.float16), note="reduced in float32 (clip_grad_norm_ on half gradients)"),
    _foreach("diopiForeachZero", "_foreach_zero_.default", {"self": _lst()}),
    _foreach("diopiForeachCopy", "_foreach_copy_.default", {"self": _lst(), "src": _lst()}),
    _foreach("diopiForeachCopy", "_foreach_copy_.default", {"self": _lst(dtype=torch.float32), "src": _lst()},
             dtypes=(torch.bfloat16, torch.float16, torch.float64), lists=LISTS[:2],
             note="copy with a dtype conversion into float32 master weights"),
    _unary("diopiForeachNeg", "neg"),
    *_binary("diopiForeachMaximum", "maximum"),
    *_binary("diopiForeachMinimum", "minimum"),
    *_binary("diopiForeachClampMin", "clamp_min"),
    *_binary("diopiForeachClampMax", "clamp_max"),
    _foreach("diopiForeachPow", "_foreach_pow.List", {"self": _lst(POSITIVE), "exponent": _lst()},
             inplace="_foreach_pow_.List"),
    _foreach("diopiForeachPow", "_foreach_pow.Scalar", {"self": _lst(POSITIVE)}, {"exponent": [2, 0.5, -1.5]},
             inplace="_foreach_pow_.Scalar"),
    _foreach("diopiForeachPow", "_foreach_pow.ScalarList", {"self": _lst(POSITIVE)}, {"exponent": [[2, 0.5, 3]]},
             inplace="_foreach_pow_.ScalarList"),
    _foreach("diopiForeachPow", "_foreach_pow.ScalarAndTensor", {"exponent": _lst()}, {"self": [0.9, 2.0]},
             note="a scalar base (Adam's bias corrections beta ** step)"),
    _foreach("diopiForeachMax", "_foreach_max.default", {"self": _lst()}, lists=NONEMPTY,
             note="max of an empty tensor is undefined"),
    _unary("diopiForeachAbs", "abs"),
    _unary("diopiForeachSign", "sign", Values("special")),
    _unary("diopiForeachReciprocal", "reciprocal", Values("uniform", 0.5, 3.0)),
    _unary("diopiForeachRsqrt", "rsqrt", POSITIVE),
    _unary("diopiForeachExp", "exp", Values("normal", -5, 5)),
    _unary("diopiForeachExpm1", "expm1", Values("normal", -5, 5)),
    _unary("diopiForeachLog", "log", POSITIVE),
    _unary("diopiForeachLog1p", "log1p", Values("uniform", -0.9, 5.0)),
    _unary("diopiForeachLog2", "log2", POSITIVE),
    _unary("diopiForeachLog10", "log10", POSITIVE),
    _unary("diopiForeachSigmoid", "sigmoid", Values("normal", -8, 8)),
    _unary("diopiForeachTanh", "tanh", Values("normal", -4, 4)),
    _unary("diopiForeachSin", "sin", Values("normal", -6, 6)),
    _unary("diopiForeachCos", "cos", Values("normal", -6, 6)),
    _unary("diopiForeachErf", "erf", Values("normal", -3, 3)),
    _unary("diopiForeachFloor", "floor", Values("normal", -10, 10)),
    _unary("diopiForeachCeil", "ceil", Values("normal", -10, 10)),
    _unary("diopiForeachRound", "round", Values("normal", -10, 10)),
    _unary("diopiForeachTrunc", "trunc", Values("normal", -10, 10)),
    _unary("diopiForeachFrac", "frac", Values("normal", -10, 10)),
]
