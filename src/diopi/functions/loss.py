"""Loss functions."""

FAMILY = "loss"

# name | packets | tags | backward function | summary
TABLE = """
diopiNLLLoss | nll_loss_forward nll_loss2d_forward |
diopiNLLLossBackward | nll_loss_backward nll_loss2d_backward | backward
diopiMSELoss | mse_loss |
diopiMSELossBackward | mse_loss_backward | backward
diopiBCELoss | binary_cross_entropy |
diopiBCELossBackward | binary_cross_entropy_backward | backward
diopiSmoothL1Loss | smooth_l1_loss |
diopiSmoothL1LossBackward | smooth_l1_loss_backward | backward
"""
