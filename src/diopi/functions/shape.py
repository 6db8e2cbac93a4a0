"""Shape, copy, fill and factory functions."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "shape"

# name | packets | tags | backward function | summary
TABLE = """
diopiCat | cat | | | Concatenate tensors along a dim.
diopiStack | stack | | | Stack tensors along a new dim.
diopiFlip | flip | | | Reverse the order of elements along the given dims.
diopiRoll | roll | | | Shift elements circularly along the given dims.
diopiRot90 | rot90 | | | Rotate by 90 degrees k times in the plane of two dims.
diopiRepeat | repeat | | | Tile the tensor the given number of times per dim.
diopiRepeatInterleave | repeat_interleave | | | Repeat each index i repeats[i] times (the index form behind repeat_interleave).
diopiTril | tril tril_ | | | Lower triangle of a matrix (batch), the rest zeroed.
diopiTriu | triu triu_ | | | Upper triangle of a matrix (batch), the rest zeroed.
diopiDiagEmbed | diag_embed | | | Tensors with the last dim placed on a diagonal of two new dims.
diopiDiagonalCopy | diagonal_copy | | | a copy of a diagonal of two dims (torch.diag of a matrix).
diopiBlockDiag | block_diag | | | Block diagonal matrix from a list of matrices.
diopiNarrowCopy | narrow_copy | | | a copy of length elements from start along dim.
diopiFill | fill fill_ zero_ zeros_like ones_like full_like new_zeros new_ones new_full scalar_tensor | | | Fill a tensor with a value, or create one like another filled with a value.
diopiCopy | copy copy_ clone _to_copy | | | Copy values between tensors, with dtype conversion and broadcasting.
diopiEye | eye | | | Identity matrix of n rows and m columns.
diopiLinspace | linspace | | | Steps evenly spaced values from start to end.
diopiLogspace | logspace | | | Steps values evenly spaced in log scale from base**start to base**end.
diopiArange | arange | | | Values from start to end (exclusive) by step.
diopiSliceScatter | slice_scatter | | | Input with a slice along dim replaced by src.
diopiSelectScatter | select_scatter | | | Input with index along dim replaced by src.
diopiDiagonalScatter | diagonal_scatter | | | Input with a diagonal replaced by src.
diopiAsStridedScatter | as_strided_scatter | | | Input with a strided view replaced by src.
diopiSliceBackward | slice_backward select_backward | backward | | Gradient of slice and select: the gradient placed into zeros of the input shape.
diopiDiagonalBackward | diagonal_backward | backward | | Gradient of diagonal: the gradient placed on a diagonal of zeros.
diopiUnfoldBackward | unfold_backward | backward | | Gradient of unfold: overlapping windows summed back into the input shape.
"""
