"""Reductions and scans."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "reduction"

# name | packets | tags | backward function | summary
TABLE = """
diopiSum | sum | | | Sum over all or the given dims, optional dtype.
diopiTensorStats | diopi::tensor_stats | | | Min, max, sum and 2-norm of the finite elements and the non-finite and NaN counts of each tensor in a list, as one device tensor (tool statistics without a host read).
diopiNanSum | nansum | | | Sum treating NaN as zero.
diopiMean | mean | | | Mean over all or the given dims.
diopiProd | prod | | | Product over all elements or one dim.
diopiMax | max amax | | | Maximum over all elements, or values and indices along a dim; amax over dims.
diopiMin | min amin | | | Minimum over all elements, or values and indices along a dim; amin over dims.
diopiAminmax | aminmax _aminmax | | | Minimum and maximum in one pass, over all or along a dim.
diopiArgmax | argmax | | | Index of the maximum, flattened or along a dim.
diopiArgmin | argmin | | | Index of the minimum, flattened or along a dim.
diopiAny | any | | | Whether any element is true, over all or the given dims.
diopiAll | all | | | Whether all elements are true, over all or the given dims.
diopiCountNonzero | count_nonzero | | | Number of non-zero elements over all or the given dims.
diopiNorm | norm linalg_vector_norm | | | P-norm over all or the given dims.
diopiVar | var var_mean | | | Variance with a correction, optionally with the mean.
diopiStd | std std_mean | | | Standard deviation with a correction, optionally with the mean.
diopiMedian | median | | | Lower median over all elements, or values and indices along a dim.
diopiNanMedian | nanmedian | | | Median ignoring NaN, over all elements or along a dim.
diopiMode | mode | | | Most frequent value and its index along a dim.
diopiKthvalue | kthvalue | | | K-th smallest value and its index along a dim.
diopiTrace | trace | | | Sum of the main diagonal of a matrix.
diopiHistc | histc | | | Histogram with equal-width bins between min and max.
diopiBincount | bincount | | | Count of each non-negative integer value, optionally weighted.
diopiCumsum | cumsum cumsum_ | | | Cumulative sum along a dim.
diopiCumprod | cumprod cumprod_ | | | Cumulative product along a dim.
diopiCummax | cummax _cummax_helper | | | Running maximum and its index along a dim.
diopiCummin | cummin _cummin_helper | | | Running minimum and its index along a dim.
diopiLogCumSumExp | logcumsumexp _logcumsumexp | | | Log of the cumulative sum of exp along a dim, stable.
diopiLogSumExp | logsumexp | | | Log of the sum of exp over the given dims, stable.
"""
