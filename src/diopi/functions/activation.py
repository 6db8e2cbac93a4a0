"""Activation functions and their backward functions."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "activation"

# name | packets | tags | backward function | summary
TABLE = """
diopiTanh | tanh tanh_ | | diopiTanhBackward | Hyperbolic tangent.
diopiTanhBackward | tanh_backward | backward | | Gradient of tanh from its output: grad * (1 - out**2).
diopiSigmoid | sigmoid sigmoid_ | | diopiSigmoidBackward | Logistic function 1 / (1 + exp(-x)).
diopiSigmoidBackward | sigmoid_backward | backward | | Gradient of sigmoid from its output: grad * out * (1 - out).
diopiLogit | logit logit_ | | diopiLogitBackward | log(p / (1 - p)) with optional clamping of p to [eps, 1 - eps].
diopiLogitBackward | logit_backward | backward | | Gradient of logit, zero outside [eps, 1 - eps] when eps is given.
diopiRelu | relu relu_ | | diopiThresholdBackward | max(x, 0).
diopiThreshold | threshold threshold_ | | diopiThresholdBackward | x where x > threshold, else value.
diopiThresholdBackward | threshold_backward | backward | | Grad where self > threshold, else 0 (the gradient of relu and threshold).
diopiLeakyRelu | leaky_relu leaky_relu_ | | diopiLeakyReluBackward | x for x > 0, negative_slope * x otherwise.
diopiLeakyReluBackward | leaky_relu_backward | backward | | Gradient of leaky_relu.
diopiHardtanh | hardtanh hardtanh_ | | diopiHardtanhBackward | clamp(x, min_val, max_val) (relu6 as well).
diopiHardtanhBackward | hardtanh_backward | backward | | Gradient of hardtanh: grad inside (min_val, max_val), else 0.
diopiHardswish | hardswish hardswish_ | | diopiHardswishBackward | x * relu6(x + 3) / 6.
diopiHardswishBackward | hardswish_backward | backward | | Gradient of hardswish.
diopiHardsigmoid | hardsigmoid hardsigmoid_ | | diopiHardsigmoidBackward | relu6(x + 3) / 6.
diopiHardsigmoidBackward | hardsigmoid_backward | backward | | Gradient of hardsigmoid.
diopiHardshrink | hardshrink | | diopiHardshrinkBackward | x where abs(x) > lambd, else 0.
diopiHardshrinkBackward | hardshrink_backward | backward | | Gradient of hardshrink.
diopiSoftshrink | softshrink | | diopiSoftshrinkBackward | x - lambd above lambd, x + lambd below -lambd, else 0.
diopiSoftshrinkBackward | softshrink_backward | backward | | Gradient of softshrink.
diopiElu | elu elu_ | | diopiEluBackward | scale * (x for x > 0, alpha * (exp(x * input_scale) - 1) otherwise) (selu as well).
diopiEluBackward | elu_backward | backward | | Gradient of elu, celu and selu, from the input or the output.
diopiCelu | celu celu_ | | diopiEluBackward | max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
diopiGelu | gelu gelu_ | | diopiGeluBackward | x * Phi(x), exact or tanh approximation.
diopiGeluBackward | gelu_backward | backward | | Gradient of gelu.
diopiSilu | silu silu_ | | diopiSiluBackward | x * sigmoid(x).
diopiSiluBackward | silu_backward | backward | | Gradient of silu.
diopiMish | mish mish_ | | diopiMishBackward | x * tanh(softplus(x)).
diopiMishBackward | mish_backward | backward | | Gradient of mish (composite in PyTorch, claimed by torch_dipu).
diopiSoftplus | softplus | | diopiSoftplusBackward | log(1 + exp(beta * x)) / beta, linear above threshold.
diopiSoftplusBackward | softplus_backward | backward | | Gradient of softplus.
diopiLogSigmoid | log_sigmoid_forward | | diopiLogSigmoidBackward | log(sigmoid(x)) with the buffer its backward reads.
diopiLogSigmoidBackward | log_sigmoid_backward | backward | | Gradient of log_sigmoid.
diopiGlu | glu | | diopiGluBackward | Gated linear unit: first half * sigmoid(second half) along dim.
diopiGluBackward | glu_backward | backward | | Gradient of glu.
diopiPrelu | _prelu_kernel | | diopiPreluBackward | x for x > 0, weight * x otherwise (weight per channel or shared).
diopiPreluBackward | _prelu_kernel_backward | backward | | Gradients of prelu for input and weight.
diopiRReluWithNoise | rrelu_with_noise rrelu_with_noise_ | random | diopiRReluWithNoiseBackward | Randomized leaky relu: negative slope drawn in [lower, upper), written to noise.
diopiRReluWithNoiseBackward | rrelu_with_noise_backward | backward | | Gradient of rrelu from the recorded noise.
diopiSoftmax | _softmax | | diopiSoftmaxBackward | Softmax along dim.
diopiSoftmaxBackward | _softmax_backward_data | backward | | Gradient of softmax from its output.
diopiLogSoftmax | _log_softmax | | diopiLogSoftmaxBackward | Log of softmax along dim, stable.
diopiLogSoftmaxBackward | _log_softmax_backward_data | backward | | Gradient of log_softmax from its output.
"""
