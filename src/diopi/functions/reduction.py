"""Reductions and scans."""

FAMILY = "reduction"

# name | packets | tags | backward function | summary
TABLE = """
diopiSum | sum |
diopiMean | mean |
diopiProd | prod |
diopiMax | max amax |
diopiMin | min amin |
diopiArgmax | argmax |
diopiArgmin | argmin |
diopiAny | any |
diopiAll | all |
diopiNorm | norm linalg_vector_norm |
diopiVar | var var_mean |
diopiStd | std std_mean |
diopiCumsum | cumsum cumsum_ |
diopiCumprod | cumprod cumprod_ |
diopiLogSumExp | logsumexp |
"""
