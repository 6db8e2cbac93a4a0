"""Normalization layers."""
# ruff: noqa: E501  (the table has one function per line, however long)

from diopi.host_kernels_norm import REFERENCES  # noqa: F401  (SyncBatchNorm kernels, CUDA-only in PyTorch)

FAMILY = "norm"

# name | packets | tags | backward function | summary
TABLE = """
diopiBatchNorm | native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training | | diopiBatchNormBackward | Batch normalization (training statistics or running statistics).
diopiBatchNormBackward | native_batch_norm_backward | backward | | Gradients of batch norm for input, weight and bias.
diopiBatchNormUpdateStats | batch_norm_update_stats | | | Batch mean and variance, updating the running statistics.
diopiBatchNormStats | batch_norm_stats | | | SyncBatchNorm: per-channel mean and inverse std of the local batch.
diopiBatchNormGatherStatsWithCounts | batch_norm_gather_stats_with_counts | | | SyncBatchNorm: global statistics from every rank's, updating the running ones.
diopiBatchNormElemt | batch_norm_elemt | | | SyncBatchNorm: (x - mean) * invstd * weight + bias.
diopiBatchNormBackwardReduce | batch_norm_backward_reduce | backward | | SyncBatchNorm backward: per-channel sums of dy and dy * (x - mean), weight and bias grads.
diopiBatchNormBackwardElemt | batch_norm_backward_elemt | backward | | SyncBatchNorm backward: the input's gradient from the global sums.
diopiLayerNorm | native_layer_norm | | diopiLayerNormBackward | Layer normalization over the trailing dimensions, with mean and rstd.
diopiLayerNormBackward | native_layer_norm_backward | backward | | Gradients of layer norm for input, weight and bias.
diopiGroupNorm | native_group_norm | | diopiGroupNormBackward | Group normalization, with per-group mean and rstd.
diopiGroupNormBackward | native_group_norm_backward | backward | | Gradients of group norm for input, weight and bias.
diopiRMSNorm | rms_norm _fused_rms_norm | | diopiRMSNormBackward | RMS normalization over the trailing dimensions (claimed before decomposition).
diopiRMSNormBackward | _fused_rms_norm_backward | backward | | Gradients of RMS norm for input and weight.
diopiWeightNorm | _weight_norm_interface | | diopiWeightNormBackward | Weight normalization: v / norm(v) * g along a dimension, with the norms.
diopiWeightNormBackward | _weight_norm_interface_backward | backward | | Gradients of weight normalization for v and g.
diopiRenorm | renorm renorm_ | | | Rescale sub-tensors whose p-norm exceeds maxnorm.
"""
