"""The DIOPI function table: each line names a function, the ATen operator packets it serves, and tags.

Tags: ``random`` (never compared by value), ``matmul`` (affected by a device's matmul precision),
``backward`` (a gradient kernel). A function's reference is the ATen operator on the CPU, except where
the CPU build lacks the operator (:mod:`diopi.host_kernels`). The signature documented for each function
is the ATen schema of the first packet it serves, in DIOPI naming.
"""

from __future__ import annotations

import torch

from diopi.host_kernels import REFERENCES
from diopi.registry import DiopiFunction, reference_impl, register_function

# name | ATen packets | tags
_TABLE = """
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
diopiTanh | tanh tanh_ |
diopiTanhBackward | tanh_backward | backward
diopiErf | erf erf_ |
diopiErfinv | erfinv erfinv_ |
diopiFloor | floor floor_ |
diopiCeil | ceil ceil_ |
diopiRound | round round_ |
diopiTrunc | trunc trunc_ |
diopiFrac | frac frac_ |
diopiSigmoid | sigmoid sigmoid_ |
diopiSigmoidBackward | sigmoid_backward | backward
diopiLogit | logit logit_ |
diopiRelu | relu relu_ |
diopiThreshold | threshold threshold_ |
diopiThresholdBackward | threshold_backward | backward
diopiLeakyRelu | leaky_relu leaky_relu_ |
diopiLeakyReluBackward | leaky_relu_backward | backward
diopiHardtanh | hardtanh hardtanh_ |
diopiHardtanhBackward | hardtanh_backward | backward
diopiHardswish | hardswish hardswish_ |
diopiHardswishBackward | hardswish_backward | backward
diopiHardsigmoid | hardsigmoid hardsigmoid_ |
diopiHardsigmoidBackward | hardsigmoid_backward | backward
diopiElu | elu elu_ |
diopiEluBackward | elu_backward | backward
diopiGelu | gelu gelu_ |
diopiGeluBackward | gelu_backward | backward
diopiSilu | silu silu_ |
diopiSiluBackward | silu_backward | backward
diopiMish | mish mish_ |
diopiSoftplus | softplus |
diopiSoftplusBackward | softplus_backward | backward
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
diopiWhere | where |
diopiMaskedFill | masked_fill masked_fill_ |
diopiAddcmul | addcmul addcmul_ |
diopiAddcdiv | addcdiv addcdiv_ |
diopiLerp | lerp lerp_ |
diopiMm | mm | matmul
diopiBmm | bmm | matmul
diopiAddmm | addmm addmm_ | matmul
diopiBaddbmm | baddbmm baddbmm_ | matmul
diopiMv | mv | matmul
diopiDot | dot vdot | matmul
diopiConvolution | convolution | matmul
diopiConvolutionBackward | convolution_backward | matmul backward
diopiSum | sum |
diopiMean | mean |
diopiProd | prod |
diopiMax | max amax |
diopiMin | min amin |
diopiArgmax | argmax |
diopiArgmin | argmin |
diopiAny | any |
diopiAll | all |
diopiNorm | norm linalg_vector_norm |
diopiVar | var var_mean |
diopiStd | std std_mean |
diopiCumsum | cumsum cumsum_ |
diopiCumprod | cumprod cumprod_ |
diopiLogSumExp | logsumexp |
diopiSoftmax | _softmax |
diopiSoftmaxBackward | _softmax_backward_data | backward
diopiLogSoftmax | _log_softmax |
diopiLogSoftmaxBackward | _log_softmax_backward_data | backward
diopiNLLLoss | nll_loss_forward nll_loss2d_forward |
diopiNLLLossBackward | nll_loss_backward nll_loss2d_backward | backward
diopiMSELoss | mse_loss |
diopiMSELossBackward | mse_loss_backward | backward
diopiBCELoss | binary_cross_entropy |
diopiBCELossBackward | binary_cross_entropy_backward | backward
diopiSmoothL1Loss | smooth_l1_loss |
diopiSmoothL1LossBackward | smooth_l1_loss_backward | backward
diopiBatchNorm | native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training |
diopiBatchNormBackward | native_batch_norm_backward | backward
diopiLayerNorm | native_layer_norm |
diopiLayerNormBackward | native_layer_norm_backward | backward
diopiGroupNorm | native_group_norm |
diopiGroupNormBackward | native_group_norm_backward | backward
diopiRMSNormBackward | _fused_rms_norm_backward | backward
diopiEmbedding | embedding |
diopiEmbeddingBackward | embedding_dense_backward | backward
diopiIndexSelect | index_select |
diopiIndex | index |
diopiIndexPut | index_put index_put_ _index_put_impl_ |
diopiIndexAdd | index_add index_add_ |
diopiIndexFill | index_fill index_fill_ |
diopiIndexCopy | index_copy index_copy_ |
diopiGather | gather |
diopiScatter | scatter scatter_ scatter_add scatter_add_ scatter_reduce scatter_reduce_ |
diopiMaskedSelect | masked_select |
diopiMaskedScatter | masked_scatter masked_scatter_ |
diopiNonzero | nonzero |
diopiCat | cat |
diopiStack | stack |
diopiSort | sort |
diopiTopk | topk |
diopiFlip | flip |
diopiRoll | roll |
diopiRepeat | repeat |
diopiTril | tril tril_ |
diopiTriu | triu triu_ |
diopiFill | fill fill_ zero_ zeros_like ones_like full_like new_zeros new_ones new_full scalar_tensor |
diopiCopy | copy copy_ clone _to_copy |
diopiLinspace | linspace |
diopiArange | arange |
diopiPad | constant_pad_nd reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d |
diopiMaxPool2d | max_pool2d_with_indices |
diopiMaxPool2dBackward | max_pool2d_with_indices_backward | backward
diopiAvgPool2d | avg_pool2d |
diopiAvgPool2dBackward | avg_pool2d_backward | backward
diopiAdaptiveAvgPool2d | _adaptive_avg_pool2d |
diopiAdaptiveAvgPool2dBackward | _adaptive_avg_pool2d_backward | backward
diopiUpsampleNearest | upsample_nearest1d upsample_nearest2d |
diopiUpsampleLinear | upsample_linear1d upsample_bilinear2d |
diopiSliceBackward | slice_backward select_backward | backward
diopiUnfold | im2col col2im |
diopiScaledDotProductAttention | _scaled_dot_product_flash_attention_for_cpu |
diopiScaledDotProductAttentionBackward | _scaled_dot_product_flash_attention_for_cpu_backward | backward
diopiDropout | native_dropout | random
diopiDropoutBackward | native_dropout_backward | backward
diopiBernoulli | bernoulli bernoulli_ | random
diopiNormal | normal normal_ | random
diopiUniform | uniform uniform_ | random
diopiRandom | random random_ | random
diopiRandperm | randperm | random
diopiMultinomial | multinomial | random
diopiExponential | exponential exponential_ | random
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
diopiLstmCell | _thnn_fused_lstm_cell |
diopiLstmCellBackward | _thnn_fused_lstm_cell_backward_impl | backward
diopiGruCell | _thnn_fused_gru_cell |
diopiGruCellBackward | _thnn_fused_gru_cell_backward | backward
"""


def _signature(name: str, packet: str) -> str:
    """A DIOPI-style prototype derived from the ATen schema of ``packet``."""
    packet_obj = getattr(torch.ops.aten, packet, None)
    if packet_obj is None:
        return f"{name}(...)"
    overloads = sorted(packet_obj.overloads(), key=lambda o: (o != "Tensor", o != "default", o))
    schema = getattr(packet_obj, overloads[0])._schema
    args = ", ".join(f"{a.type} {a.name}" for a in schema.arguments)
    return f"{name}({args})"


def _load() -> None:
    for line in _TABLE.strip().splitlines():
        name, packets, tags = (part.strip() for part in line.split("|"))
        aten = tuple(packets.split())
        register_function(
            DiopiFunction(
                name=name,
                signature=_signature(name, aten[0]),
                aten=aten,
                tags=frozenset(tags.split()),
                reference=REFERENCES.get(name, reference_impl),
            )
        )


_load()
