"""Shape, copy, fill and factory functions."""

FAMILY = "shape"

# name | packets | tags | backward function | summary
TABLE = """
diopiCat | cat |
diopiStack | stack |
diopiFlip | flip |
diopiRoll | roll |
diopiRepeat | repeat |
diopiTril | tril tril_ |
diopiTriu | triu triu_ |
diopiFill | fill fill_ zero_ zeros_like ones_like full_like new_zeros new_ones new_full scalar_tensor |
diopiCopy | copy copy_ clone _to_copy |
diopiLinspace | linspace |
diopiArange | arange |
diopiSliceBackward | slice_backward select_backward | backward
"""
