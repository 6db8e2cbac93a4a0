"""Sorting, top-k and unique."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "sort"

# name | packets | tags | backward function | summary
TABLE = """
diopiSort | sort | | | Sorted values and their indices along a dim, optionally stable and descending.
diopiTopk | topk | | | k largest or smallest values and their indices along a dim.
diopiUnique | _unique2 _unique | | | Sorted unique elements, optionally with inverse indices and counts.
diopiUniqueConsecutive | unique_consecutive | | | Elements with consecutive duplicates removed, optionally with inverse and counts.
diopiUniqueDim | unique_dim | | | Unique slices along a dim, optionally with inverse indices and counts.
"""
