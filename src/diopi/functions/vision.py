"""Vision functions: interpolation, grid sampling, ROI pooling, NMS."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "vision"

# name | packets | tags | backward function | summary
TABLE = """
diopiUpsampleNearest | upsample_nearest1d upsample_nearest2d upsample_nearest3d | | diopiUpsampleNearestBackward | Nearest-neighbour resize (legacy floor rounding), 1-D to 3-D.
diopiUpsampleNearestBackward | upsample_nearest1d_backward upsample_nearest2d_backward upsample_nearest3d_backward | backward | | Gradient of nearest-neighbour resize.
diopiUpsampleNearestExact | _upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d | | diopiUpsampleNearestExactBackward | Nearest-neighbour resize with pixel-center rounding ("nearest-exact").
diopiUpsampleNearestExactBackward | _upsample_nearest_exact1d_backward _upsample_nearest_exact2d_backward _upsample_nearest_exact3d_backward | backward | | Gradient of nearest-exact resize.
diopiUpsampleLinear | upsample_linear1d upsample_bilinear2d | | diopiUpsampleLinearBackward | Linear and bilinear resize, align_corners or not.
diopiUpsampleLinearBackward | upsample_linear1d_backward upsample_bilinear2d_backward | backward | | Gradient of linear and bilinear resize.
diopiUpsampleTrilinear3d | upsample_trilinear3d | | diopiUpsampleTrilinear3dBackward | Trilinear resize of volumes.
diopiUpsampleTrilinear3dBackward | upsample_trilinear3d_backward | backward | | Gradient of trilinear resize.
diopiUpsampleBicubic2d | upsample_bicubic2d | | diopiUpsampleBicubic2dBackward | Bicubic resize (a = -0.75), align_corners or not.
diopiUpsampleBicubic2dBackward | upsample_bicubic2d_backward | backward | | Gradient of bicubic resize.
diopiUpsampleAntialias | _upsample_bilinear2d_aa _upsample_bicubic2d_aa | | diopiUpsampleAntialiasBackward | Antialiased bilinear or bicubic downscale (PIL-like).
diopiUpsampleAntialiasBackward | _upsample_bilinear2d_aa_backward _upsample_bicubic2d_aa_backward | backward | | Gradient of antialiased resize.
diopiGridSampler2d | grid_sampler_2d | | diopiGridSampler2dBackward | Sample an image at grid locations (bilinear, nearest, bicubic; zeros, border, reflection).
diopiGridSampler2dBackward | grid_sampler_2d_backward | backward | | Gradients of 2-D grid sampling for the image and the grid.
diopiGridSampler3d | grid_sampler_3d | | diopiGridSampler3dBackward | Sample a volume at grid locations (bilinear or nearest).
diopiGridSampler3dBackward | grid_sampler_3d_backward | backward | | Gradients of 3-D grid sampling for the volume and the grid.
diopiAffineGridGenerator | affine_grid_generator | | | Sampling grid of an affine transform (spatial transformer networks).
diopiPixelShuffle | pixel_shuffle | | | Rearrange channels into an r-times larger image (sub-pixel convolution).
diopiPixelUnshuffle | pixel_unshuffle | | | Rearrange an image into r*r times more channels.
diopiChannelShuffle | channel_shuffle native_channel_shuffle | | | Interleave the channels of groups (ShuffleNet).
diopiRoiAlign | diopi::roi_align | | diopiRoiAlignBackward | ROI Align: bilinear-sampled average per bin for each box (Mask R-CNN).
diopiRoiAlignBackward | diopi::roi_align_backward | backward | | Gradient of ROI Align for the feature map.
diopiNms | diopi::nms | | | Greedy non-maximum suppression of boxes by IoU, highest score first.
"""
