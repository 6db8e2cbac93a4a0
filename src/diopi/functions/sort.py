"""Sorting, top-k and unique."""

FAMILY = "sort"

# name | packets | tags | backward function | summary
TABLE = """
diopiSort | sort |
diopiTopk | topk |
"""
