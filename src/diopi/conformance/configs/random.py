"""Conformance cases of the random family, judged statistically (never by value) plus seed reproducibility.

Moments are checked on a few thousand samples drawn with one parameter set per config (the expected mean and
standard deviation written out from the distribution's formulas). Distribution parameters given as tensors
(rates, counts, concentrations) are constant tensors (``Values("uniform", c, c)``) so the samples share one
distribution. The gradient functions of the samplers (``_standard_gamma_grad``, ``_dirichlet_grad``) and
dropout's backward are deterministic and compared by value.
"""

from __future__ import annotations

import math

import torch

from diopi.conformance.spec import FLOAT, Config, Input, Stats, Values

F32_F64 = (torch.float32, torch.float64)
SHAPES = [((64, 64),), ((4096,),), ((8, 16, 32),)]
FILL = [((64, 64),), ((3, 1000),), ((0, 5),), ((),)]


def _constant(value: float) -> Values:
    return Values("uniform", value, value)


def _fill(function: str, op: str, params: dict, stats: Stats, dtypes: tuple = FLOAT, shapes: list | None = None,
          note: str = "") -> Config:
    """An in-place sampler writing into ``self`` (the values there are overwritten)."""
    return Config(function, op=op, inputs={"self": Input()}, shapes=list(shapes or FILL), dtypes=dtypes,
                  params=params, stats=stats, note=note, layouts=("contiguous", "noncontiguous"))


def _moments(mean: float, std: float) -> Stats:
    return Stats("moments", mean=mean, std=std)


#: log-normal with mu 0, sigma 0.5: mean exp(sigma^2 / 2), variance (exp(sigma^2) - 1) exp(sigma^2).
LOG_NORMAL_MEAN = math.exp(0.125)
LOG_NORMAL_STD = math.sqrt((math.exp(0.25) - 1) * math.exp(0.25))

CONFIGS: list[Config] = [
    Config("diopiDropout", op="native_dropout.default", inputs={"input": Input()}, shapes=SHAPES + [((0, 4),)],
           params={"p": [0.1, 0.5, 0.9], "train": [True]}, stats=Stats("dropout")),
    Config("diopiDropout", op="native_dropout.default", inputs={"input": Input()}, shapes=SHAPES[:1],
           params={"p": [0.0], "train": [True]}, stats=Stats("dropout"), note="p=0 keeps everything"),
    Config("diopiDropoutBackward", op="native_dropout_backward.default",
           inputs={"grad_output": Input(), "mask": Input(dtype=torch.bool, values=Values("bool"))},
           shapes=[((4, 5), (4, 5)), ((0, 3), (0, 3)), ((), ()), ((64, 128), (64, 128))],
           params={"scale": [1.0 / 0.9, 2.0]}),
    Config("diopiBernoulli", op="bernoulli.default", inputs={"self": Input(values=Values("probability"))},
           shapes=SHAPES + [((0, 3),)], stats=Stats("bernoulli"), note="p per element; ratio against their mean"),
    Config("diopiBernoulli", op="bernoulli.p", inputs={"self": Input()}, shapes=SHAPES, params={"p": [0.2, 0.7]},
           stats=Stats("bernoulli", mean="param:p")),
    _fill("diopiBernoulli", "bernoulli_.float", {"p": [0.3, 0.9]}, Stats("bernoulli", mean="param:p")),
    Config("diopiBernoulli", op="bernoulli_.Tensor", inputs={"self": Input(), "p": Input(values=_constant(0.25))},
           shapes=[((64, 64), (64, 64)), ((32, 100), (100,))], stats=Stats("bernoulli", mean=0.25)),
    _fill("diopiNormal", "normal_.default", {"mean": [0.0, 3.0], "std": [1.0, 0.25]},
          Stats("moments", mean="param:mean", std="param:std")),
    Config("diopiNormal", op="normal.Tensor_float", inputs={"mean": Input(values=_constant(-2.0))}, shapes=SHAPES,
           params={"std": [0.5, 2.0]}, stats=Stats("moments", mean=-2.0, std="param:std")),
    Config("diopiNormal", op="normal.Tensor_Tensor",
           inputs={"mean": Input(values=_constant(1.0)), "std": Input(values=_constant(3.0))},
           shapes=[((64, 64), (64, 64)), ((4096,), (1,))], stats=_moments(1.0, 3.0)),
    _fill("diopiUniform", "uniform_.default", {"from": [0.0, -3.0], "to": [1.0, 5.0]},
          Stats("range", low="param:from", high="param:to")),
    Config("diopiUniform", op="uniform.default", inputs={"self": Input()}, shapes=SHAPES, dtypes=F32_F64,
           params={"from": [-1.0], "to": [1.0]}, stats=_moments(0.0, 1 / math.sqrt(3))),
    _fill("diopiRandom", "random_.from", {"from": [-5, 0], "to": [7]}, Stats("range", low="param:from", high=7),
          dtypes=(torch.float32, torch.int64, torch.int32, torch.int16)),
    _fill("diopiRandom", "random_.to", {"to": [1, 100]}, Stats("range", low=0, high="param:to"),
          dtypes=(torch.float32, torch.float64, torch.int64, torch.uint8)),
    _fill("diopiRandom", "random_.default", {}, Stats("range", low=0, high=2**24 + 1),
          dtypes=(torch.float32,), note="float32: integers in [0, 2^24]"),
    _fill("diopiRandom", "random_.default", {}, Stats("range", low=0, high=256), dtypes=(torch.uint8,)),
    Config("diopiRandperm", op="randperm.default", params={"n": [0, 1, 7, 1000, 5000]}, dtypes=(torch.int64,),
           stats=Stats("permutation")),
    Config("diopiMultinomial", op="multinomial.default", inputs={"self": Input(values=Values("positive"))},
           shapes=[((10,),), ((4, 20),), ((64, 100),)], dtypes=F32_F64,
           params={"num_samples": [1, 5], "replacement": [False, True]}, stats=Stats("categorical")),
    Config("diopiMultinomial", op="multinomial.default", inputs={"self": Input(values=Values("positive"))},
           shapes=[((3, 5),)], dtypes=F32_F64, params={"num_samples": [5], "replacement": [False]},
           stats=Stats("categorical"), note="every category drawn once"),
    _fill("diopiExponential", "exponential_.default", {"lambd": [1.0]}, _moments(1.0, 1.0)),
    _fill("diopiExponential", "exponential_.default", {"lambd": [4.0]}, _moments(0.25, 0.25)),
    Config("diopiExponential", op="exponential.default", inputs={"self": Input()}, shapes=SHAPES, dtypes=F32_F64,
           params={"lambd": [2.0]}, stats=_moments(0.5, 0.5)),
    _fill("diopiCauchy", "cauchy_.default", {"median": [0.0, 2.0], "sigma": [1.0, 0.1]},
          Stats("range"),
          note="no moments exist and any real value may occur: only shape, dtype and seed reproducibility are checked"),
    Config("diopiCauchy", op="cauchy.default", inputs={"self": Input()}, shapes=SHAPES, dtypes=F32_F64,
           params={"median": [0.0], "sigma": [1.0]}, stats=Stats("range")),
    _fill("diopiGeometric", "geometric_.default", {"p": [0.5]}, _moments(2.0, math.sqrt(0.5) / 0.5),
          note="trials to the first success: mean 1/p, std sqrt(1-p)/p"),
    _fill("diopiGeometric", "geometric_.default", {"p": [0.9]}, Stats("range", low=1, high=None),
          dtypes=(torch.float32, torch.int64, torch.int32)),
    _fill("diopiLogNormal", "log_normal_.default", {"mean": [0.0], "std": [0.5]},
          _moments(LOG_NORMAL_MEAN, LOG_NORMAL_STD)),
    _fill("diopiLogNormal", "log_normal_.default", {"mean": [1.0], "std": [2.0]}, Stats("range", low=0, high=None),
          note="heavy tail: only positivity"),
    Config("diopiPoisson", op="poisson.default", inputs={"self": Input(values=_constant(3.0))}, shapes=SHAPES,
           dtypes=F32_F64, stats=_moments(3.0, math.sqrt(3.0))),
    Config("diopiPoisson", op="poisson.default", inputs={"self": Input(values=Values("positive", 0.0, 50.0))},
           shapes=SHAPES + [((0,),)], dtypes=F32_F64, stats=Stats("range", low=0, high=None),
           note="rates drawn per element, zero rates included"),
    Config("diopiBinomial", op="binomial.default",
           inputs={"count": Input(values=_constant(10.0)), "prob": Input(values=_constant(0.3))},
           shapes=[(s[0], s[0]) for s in SHAPES], dtypes=F32_F64, stats=_moments(3.0, math.sqrt(2.1))),
    Config("diopiBinomial", op="binomial.default",
           inputs={"count": Input(values=Values("integer", 0, 20)), "prob": Input(values=Values("probability"))},
           shapes=[((64, 64), (64, 64)), ((0,), (0,))], dtypes=F32_F64, stats=Stats("range", low=0, high=21)),
    Config("diopiStandardGamma", op="_standard_gamma.default", inputs={"self": Input(values=_constant(2.0))},
           shapes=SHAPES, dtypes=F32_F64, stats=_moments(2.0, math.sqrt(2.0))),
    Config("diopiStandardGamma", op="_standard_gamma.default", inputs={"self": Input(values=_constant(0.5))},
           shapes=SHAPES, dtypes=F32_F64, stats=_moments(0.5, math.sqrt(0.5)), note="alpha < 1 (boosted sampler)"),
    Config("diopiStandardGammaGrad", op="_standard_gamma_grad.default",
           inputs={"self": Input(values=Values("positive", 0.2, 5.0)), "output": Input(values=Values("positive"))},
           shapes=[((5,), (5,)), ((4, 6), (4, 6)), ((0,), (0,)), ((64, 64), (64, 64))], dtypes=F32_F64),
    Config("diopiSampleDirichlet", op="_sample_dirichlet.default", inputs={"self": Input(values=_constant(1.0))},
           shapes=[((1024, 4),), ((16, 64, 4),)], dtypes=F32_F64, stats=_moments(0.25, math.sqrt(3 / 80)),
           note="alpha = 1 over 4 categories: each component Beta(1, 3)"),
    Config("diopiSampleDirichlet", op="_sample_dirichlet.default",
           inputs={"self": Input(values=Values("positive", 0.1, 5.0))}, shapes=[((64, 8),), ((0, 3),)],
           dtypes=F32_F64, stats=Stats("range", low=0, high=1.0 + 1e-6)),
    Config("diopiDirichletGrad", op="_dirichlet_grad.default",
           inputs={"x": Input(values=Values("uniform", 0.05, 0.95)), "alpha": Input(values=Values("positive", 0.5, 4)),
                   "total": Input(values=Values("positive", 2.0, 8.0))},
           shapes=[((5,), (5,), (5,)), ((4, 6), (4, 6), (4, 6)), ((64, 64), (64, 64), (64, 64))], dtypes=F32_F64),
]
