"""Convolution, padding, im2col and pooling."""

FAMILY = "conv_pool"

# name | packets | tags | backward function | summary
TABLE = """
diopiConvolution | convolution | matmul
diopiConvolutionBackward | convolution_backward | matmul backward
diopiPad | constant_pad_nd reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d |
diopiMaxPool2d | max_pool2d_with_indices |
diopiMaxPool2dBackward | max_pool2d_with_indices_backward | backward
diopiAvgPool2d | avg_pool2d |
diopiAvgPool2dBackward | avg_pool2d_backward | backward
diopiAdaptiveAvgPool2d | _adaptive_avg_pool2d |
diopiAdaptiveAvgPool2dBackward | _adaptive_avg_pool2d_backward | backward
diopiUnfold | im2col col2im |
"""
