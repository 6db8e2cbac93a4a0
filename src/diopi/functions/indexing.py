"""Indexing, gather/scatter, masking and embedding."""

FAMILY = "indexing"

# name | packets | tags | backward function | summary
TABLE = """
diopiWhere | where |
diopiMaskedFill | masked_fill masked_fill_ |
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
"""
