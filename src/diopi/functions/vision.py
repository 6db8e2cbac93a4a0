"""Vision functions: interpolation, grid sampling, ROI pooling, NMS."""

FAMILY = "vision"

# name | packets | tags | backward function | summary
TABLE = """
diopiUpsampleNearest | upsample_nearest1d upsample_nearest2d |
diopiUpsampleLinear | upsample_linear1d upsample_bilinear2d |
"""
