"""Activation functions and their backward functions."""

FAMILY = "activation"

# name | packets | tags | backward function | summary
TABLE = """
diopiTanh | tanh tanh_ |
diopiTanhBackward | tanh_backward | backward
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
diopiSoftmax | _softmax |
diopiSoftmaxBackward | _softmax_backward_data | backward
diopiLogSoftmax | _log_softmax |
diopiLogSoftmaxBackward | _log_softmax_backward_data | backward
"""
