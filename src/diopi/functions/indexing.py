"""Indexing, gather/scatter, masking and embedding."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "indexing"

# name | packets | tags | backward function | summary
TABLE = """
diopiWhere | where | | | Elements of input where condition holds, of other elsewhere (broadcasting).
diopiMaskedFill | masked_fill masked_fill_ | | | Value where mask is true, input elsewhere.
diopiEmbedding | embedding | | diopiEmbeddingBackward | Rows of a weight table selected by integer indices.
diopiEmbeddingBackward | embedding_dense_backward | backward | | Gradient of embedding: gradients summed per row, padding_idx skipped, optionally scaled by frequency.
diopiEmbeddingRenorm | embedding_renorm_ | | | Rescale in place the referenced rows whose norm exceeds max_norm.
diopiEmbeddingBag | _embedding_bag _embedding_bag_forward_only | | diopiEmbeddingBagBackward | Sum, mean or max of embedding rows per bag given by offsets, optionally weighted.
diopiEmbeddingBagBackward | _embedding_bag_backward _embedding_bag_dense_backward | backward | | Gradient of embedding_bag for the weight table.
diopiIndexSelect | index_select | | | Slices of input along dim at the given indices.
diopiIndex | index | | | Advanced indexing by a tuple of index or mask tensors.
diopiIndexPut | index_put index_put_ _index_put_impl_ | | | Write or accumulate values at advanced indices.
diopiIndexAdd | index_add index_add_ | | | Add alpha * source slices at the given indices along dim.
diopiIndexFill | index_fill index_fill_ | | | Fill slices at the given indices along dim with a value.
diopiIndexCopy | index_copy index_copy_ | | | Copy source slices to the given indices along dim.
diopiIndexReduce | index_reduce index_reduce_ | | | Reduce (prod, mean, amax, amin) source slices into the given indices along dim.
diopiGather | gather | | | Values along dim at positions given by an index tensor.
diopiScatter | scatter scatter_ scatter_add scatter_add_ scatter_reduce scatter_reduce_ | | | Write, add or reduce values into positions given by an index tensor along dim.
diopiTake | take | | | Elements of the flattened input at the given indices.
diopiPut | put put_ | | | Write or accumulate values at indices of the flattened input.
diopiMaskedSelect | masked_select | | | 1-D tensor of the elements where mask is true.
diopiMaskedScatter | masked_scatter masked_scatter_ | | | Copy source elements, in order, to the positions where mask is true.
diopiNonzero | nonzero | | | Indices of the non-zero elements.
diopiSearchsorted | searchsorted | | | Insertion indices of values into a sorted sequence, left or right.
diopiBucketize | bucketize | | | Bucket indices of values given sorted boundaries.
"""
