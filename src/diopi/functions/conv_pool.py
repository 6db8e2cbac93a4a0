"""Convolution, padding, im2col and pooling."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "conv_pool"

# name | packets | tags | backward function | summary
TABLE = """
diopiConvolution | convolution | matmul | diopiConvolutionBackward | N-d convolution, transposed or not, with stride, padding, dilation, groups.
diopiConvolutionBackward | convolution_backward | matmul backward | | Gradients of convolution for input, weight and bias.
diopiPad | constant_pad_nd reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d replication_pad3d | | | Constant, reflection or replication padding.
diopiReflectionPadBackward | reflection_pad1d_backward reflection_pad2d_backward reflection_pad3d_backward | backward | | Gradient of reflection padding.
diopiReplicationPadBackward | replication_pad1d_backward replication_pad2d_backward replication_pad3d_backward | backward | | Gradient of replication padding.
diopiMaxPool2d | max_pool2d_with_indices max_pool2d | | diopiMaxPool2dBackward | 2-D max pooling (with the argmax indices backward needs).
diopiMaxPool2dBackward | max_pool2d_with_indices_backward | backward | | Gradient of 2-D max pooling, scattered to the argmax positions.
diopiMaxPool3d | max_pool3d_with_indices | | diopiMaxPool3dBackward | 3-D max pooling with indices.
diopiMaxPool3dBackward | max_pool3d_with_indices_backward | backward | | Gradient of 3-D max pooling.
diopiAvgPool2d | avg_pool2d | | diopiAvgPool2dBackward | 2-D average pooling (ceil mode, count_include_pad, divisor override).
diopiAvgPool2dBackward | avg_pool2d_backward | backward | | Gradient of 2-D average pooling.
diopiAvgPool3d | avg_pool3d | | diopiAvgPool3dBackward | 3-D average pooling.
diopiAvgPool3dBackward | avg_pool3d_backward | backward | | Gradient of 3-D average pooling.
diopiAdaptiveAvgPool2d | _adaptive_avg_pool2d | | diopiAdaptiveAvgPool2dBackward | 2-D average pooling to a given output size.
diopiAdaptiveAvgPool2dBackward | _adaptive_avg_pool2d_backward | backward | | Gradient of 2-D adaptive average pooling.
diopiAdaptiveAvgPool3d | _adaptive_avg_pool3d | | diopiAdaptiveAvgPool3dBackward | 3-D average pooling to a given output size.
diopiAdaptiveAvgPool3dBackward | _adaptive_avg_pool3d_backward | backward | | Gradient of 3-D adaptive average pooling.
diopiAdaptiveMaxPool2d | adaptive_max_pool2d | | diopiAdaptiveMaxPool2dBackward | 2-D max pooling to a given output size, with indices.
diopiAdaptiveMaxPool2dBackward | adaptive_max_pool2d_backward | backward | | Gradient of 2-D adaptive max pooling.
diopiAdaptiveMaxPool3d | adaptive_max_pool3d | | diopiAdaptiveMaxPool3dBackward | 3-D max pooling to a given output size, with indices.
diopiAdaptiveMaxPool3dBackward | adaptive_max_pool3d_backward | backward | | Gradient of 3-D adaptive max pooling.
diopiFractionalMaxPool2d | fractional_max_pool2d | | diopiFractionalMaxPool2dBackward | 2-D fractional max pooling at given pseudo-random sample offsets.
diopiFractionalMaxPool2dBackward | fractional_max_pool2d_backward | backward | | Gradient of 2-D fractional max pooling.
diopiFractionalMaxPool3d | fractional_max_pool3d | | diopiFractionalMaxPool3dBackward | 3-D fractional max pooling at given sample offsets.
diopiFractionalMaxPool3dBackward | fractional_max_pool3d_backward | backward | | Gradient of 3-D fractional max pooling.
diopiMaxUnpool2d | max_unpool2d | | | Inverse of 2-D max pooling: values scattered to their indices, zeros elsewhere.
diopiMaxUnpool3d | max_unpool3d | | | Inverse of 3-D max pooling.
diopiUnfold | im2col col2im | | | Sliding-window patches to columns (im2col) and back, summing overlaps (col2im).
"""
