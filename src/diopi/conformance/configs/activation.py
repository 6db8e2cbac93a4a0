"""Conformance cases of the activation family; backward functions are recorded from their forward configs."""

from __future__ import annotations

import torch

from diopi.conformance.spec import Config, Input, Stats, Values

F32_BF16 = (torch.float32, torch.bfloat16)
#: The dtypes most cases use.
FLOAT3 = (torch.float32, torch.float16, torch.bfloat16)

#: 0-dim, empty, small with a size-1 dim, "large".
SHAPES = [((),), ((0, 3),), ((3, 1, 5),), ((32, 48),)]
INPLACE_SHAPES = [((5, 6),), ((16, 40),)]
#: Softmax-like ops along a dim.
DIM_SHAPES = [((0, 5),), ((4, 7),), ((2, 3, 9),), ((16, 256),)]


WIDE = Values("normal", -4, 4)


def act(function: str, op: str, inplace: str | None = None, *, values: Values = WIDE,
        params: dict | None = None, shapes: list | None = None, note: str = "") -> list[Config]:
    """An activation over :data:`SHAPES` in the common float dtypes, plus its in-place overload (marked as such,
    so that backward recipes leave it out) on :data:`INPLACE_SHAPES`."""
    configs = [Config(function, op=op, inputs={"self": Input()}, shapes=list(shapes or SHAPES), dtypes=FLOAT3,
                      values=values, params=dict(params or {}), note=note)]
    if inplace:
        first = {k: v[:1] for k, v in (params or {}).items()}
        configs.append(Config(function, op=op, inplace=inplace, inputs={"self": Input()}, shapes=list(INPLACE_SHAPES),
                              dtypes=(torch.float32,), values=values, params=first))
    return configs


CONFIGS: list[Config] = [
    *act("diopiTanh", "tanh.default", "tanh_.default"),
    Config("diopiTanhBackward", from_forward="diopiTanh"),
    *act("diopiSigmoid", "sigmoid.default", "sigmoid_.default", values=Values("normal", -8, 8)),
    Config("diopiSigmoidBackward", from_forward="diopiSigmoid"),
    *act("diopiLogit", "logit.default", "logit_.default", values=Values("uniform", 0.01, 0.99),
         params={"eps": [None, 0.05]}, shapes=SHAPES[1:]),
    Config("diopiLogit", op="logit.default", inputs={"self": Input()}, shapes=[((4, 5),)], dtypes=FLOAT3,
           values=Values("probability"), params={"eps": [1e-6]}, note="0 and 1 clamped by eps"),
    Config("diopiLogitBackward", from_forward="diopiLogit"),
    *act("diopiRelu", "relu.default", "relu_.default"),
    *act("diopiThreshold", "threshold.default", "threshold_.default",
         params={"threshold": [0.5, -1.0], "value": [-2.5]}, shapes=SHAPES[1:]),
    Config("diopiThresholdBackward", from_forward="diopiRelu"),
    Config("diopiThresholdBackward", from_forward="diopiThreshold"),
    *act("diopiLeakyRelu", "leaky_relu.default", "leaky_relu_.default", params={"negative_slope": [0.01, 0.2]},
         shapes=SHAPES[1:]),
    Config("diopiLeakyReluBackward", from_forward="diopiLeakyRelu"),
    *act("diopiHardtanh", "hardtanh.default", "hardtanh_.default",
         params={"min_val": [-1.0], "max_val": [1.0]}),
    Config("diopiHardtanh", op="hardtanh.default", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((32, 48),)],
           dtypes=FLOAT3, values=Values("normal", -8, 8), params={"min_val": [0.0], "max_val": [6.0]},
           note="relu6"),
    Config("diopiHardtanhBackward", from_forward="diopiHardtanh"),
    *act("diopiHardswish", "hardswish.default", "hardswish_.default", values=Values("normal", -5, 5)),
    Config("diopiHardswishBackward", from_forward="diopiHardswish"),
    *act("diopiHardsigmoid", "hardsigmoid.default", "hardsigmoid_.default", values=Values("normal", -5, 5)),
    Config("diopiHardsigmoidBackward", from_forward="diopiHardsigmoid"),
    *act("diopiHardshrink", "hardshrink.default", params={"lambd": [0.5, 1.5]}, shapes=SHAPES[1:]),
    Config("diopiHardshrinkBackward", from_forward="diopiHardshrink"),
    *act("diopiSoftshrink", "softshrink.default", params={"lambd": [0.5, 1.5]}, shapes=SHAPES[1:]),
    Config("diopiSoftshrinkBackward", from_forward="diopiSoftshrink"),
    *act("diopiElu", "elu.default", "elu_.default", params={"alpha": [1.0, 0.5]}, shapes=SHAPES[1:]),
    Config("diopiElu", op="elu.default", inputs={"self": Input()}, shapes=[((4, 5, 6),), ((32, 48),)],
           dtypes=FLOAT3, values=Values("normal", -4, 4),
           params={"alpha": [1.6732632423543772], "scale": [1.0507009873554805]}, note="selu's constants"),
    Config("diopiEluBackward", from_forward="diopiElu"),
    Config("diopiEluBackward", from_forward="diopiCelu"),
    *act("diopiCelu", "celu.default", "celu_.default", params={"alpha": [1.0, 2.0]}, shapes=SHAPES[1:]),
    *act("diopiGelu", "gelu.default", "gelu_.default", params={"approximate": ["none", "tanh"]}),
    Config("diopiGeluBackward", from_forward="diopiGelu"),
    *act("diopiSilu", "silu.default", "silu_.default", values=Values("normal", -6, 6)),
    Config("diopiSiluBackward", from_forward="diopiSilu"),
    *act("diopiMish", "mish.default", "mish_.default", values=Values("normal", -6, 6)),
    Config("diopiMishBackward", from_forward="diopiMish"),
    *act("diopiSoftplus", "softplus.default", params={"beta": [1.0, 2.0], "threshold": [20.0]},
         values=Values("normal", -6, 6), shapes=SHAPES[1:]),
    Config("diopiSoftplus", op="softplus.default", inputs={"self": Input()}, shapes=[((4, 5, 6),)], dtypes=FLOAT3,
           values=Values("normal", -6, 6), params={"beta": [1.0], "threshold": [1.0]},
           note="a low threshold: the linear branch taken often"),
    Config("diopiSoftplusBackward", from_forward="diopiSoftplus"),
    *act("diopiLogSigmoid", "log_sigmoid_forward.default", values=Values("normal", -10, 10)),
    Config("diopiLogSigmoidBackward", from_forward="diopiLogSigmoid"),
    Config("diopiGlu", op="glu.default", inputs={"self": Input()},
           shapes=[((0, 4),), ((4, 6),), ((2, 3, 8),), ((32, 128),)], dtypes=FLOAT3, params={"dim": [-1]}),
    Config("diopiGlu", op="glu.default", inputs={"self": Input()}, shapes=[((4, 6),), ((2, 3, 8),)],
           dtypes=FLOAT3, params={"dim": [0]}),
    Config("diopiGluBackward", from_forward="diopiGlu"),
    Config("diopiPrelu", op="_prelu_kernel.default", inputs={"self": Input(), "weight": Input()},
           shapes=[((0, 3), (3,)), ((4, 3), (1,)), ((2, 3, 5), (3, 1)), ((8, 16, 4, 4), (16, 1, 1)),
                   ((32, 64), (64,))],
           dtypes=FLOAT3, note="weight per channel (dim 1, shaped to broadcast as F.prelu shapes it) or shared"),
    Config("diopiPreluBackward", from_forward="diopiPrelu"),
    Config("diopiRReluWithNoise", op="rrelu_with_noise.default",
           inputs={"self": Input(values=Values("uniform", -1, 0)), "noise": Input(grad=False)},
           shapes=[((4, 5), (4, 5)), ((32, 48), (32, 48))], dtypes=(torch.float32, torch.float64),
           params={"lower": [0.125], "upper": [0.25], "training": [True]}, layouts=("contiguous",),
           stats=Stats("range", low=-0.25, high=0.0),
           note="negative inputs only: every output is input * a slope drawn in [lower, upper)"),
    Config("diopiRReluWithNoise", op="rrelu_with_noise.default",
           inputs={"self": Input(values=Values("uniform", 0.1, 1)), "noise": Input(grad=False)},
           shapes=[((4, 5), (4, 5))], dtypes=(torch.float32,),
           params={"lower": [0.125], "upper": [0.25], "training": [True]}, layouts=("contiguous",),
           stats=Stats("range", low=0.1, high=1.0), note="positive inputs pass unchanged"),
    Config("diopiRReluWithNoiseBackward", from_forward="diopiRReluWithNoise"),
    Config("diopiSoftmax", op="_softmax.default", inputs={"self": Input()}, shapes=list(DIM_SHAPES), dtypes=FLOAT3,
           values=Values("normal", -10, 10), params={"dim": [-1, 0], "half_to_float": [False]}),
    Config("diopiSoftmax", op="_softmax.default", inputs={"self": Input()}, shapes=[((),)], dtypes=FLOAT3,
           params={"dim": [0], "half_to_float": [False]}),
    Config("diopiSoftmaxBackward", from_forward="diopiSoftmax"),
    Config("diopiLogSoftmax", op="_log_softmax.default", inputs={"self": Input()}, shapes=list(DIM_SHAPES),
           dtypes=FLOAT3, values=Values("normal", -10, 10), params={"dim": [-1, 0], "half_to_float": [False]}),
    Config("diopiLogSoftmax", op="_log_softmax.default", inputs={"self": Input()}, shapes=[((),)], dtypes=FLOAT3,
           params={"dim": [0], "half_to_float": [False]}),
    Config("diopiLogSoftmaxBackward", from_forward="diopiLogSoftmax"),
]
