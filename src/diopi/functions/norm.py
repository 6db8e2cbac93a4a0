"""Normalization layers."""

FAMILY = "norm"

# name | packets | tags | backward function | summary
TABLE = """
diopiBatchNorm | native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training |
diopiBatchNormBackward | native_batch_norm_backward | backward
diopiLayerNorm | native_layer_norm |
diopiLayerNormBackward | native_layer_norm_backward | backward
diopiGroupNorm | native_group_norm |
diopiGroupNormBackward | native_group_norm_backward | backward
diopiRMSNormBackward | _fused_rms_norm_backward | backward
"""
