"""Loss functions."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "loss"

# name | packets | tags | backward function | summary
TABLE = """
diopiCrossEntropyLoss | cross_entropy_loss | | | log_softmax + nll_loss with class indices or probabilities, label smoothing (composite in PyTorch, claimed by torch_dipu).
diopiNLLLoss | nll_loss_forward nll_loss2d_forward | | diopiNLLLossBackward | Negative log likelihood of class indices, with weights and ignore_index.
diopiNLLLossBackward | nll_loss_backward nll_loss2d_backward | backward | | Gradient of nll_loss.
diopiMSELoss | mse_loss | | diopiMSELossBackward | Mean squared error.
diopiMSELossBackward | mse_loss_backward | backward | | Gradient of mse_loss.
diopiBCELoss | binary_cross_entropy | | diopiBCELossBackward | Binary cross entropy of probabilities, optionally weighted.
diopiBCELossBackward | binary_cross_entropy_backward | backward | | Gradient of binary_cross_entropy.
diopiBCEWithLogitsLoss | binary_cross_entropy_with_logits | | | Binary cross entropy of logits, with weight and pos_weight, stable.
diopiSmoothL1Loss | smooth_l1_loss | | diopiSmoothL1LossBackward | Squared error below beta, absolute error above.
diopiSmoothL1LossBackward | smooth_l1_loss_backward | backward | | Gradient of smooth_l1_loss.
diopiHuberLoss | huber_loss | | diopiHuberLossBackward | Squared error below delta, delta-scaled absolute error above.
diopiHuberLossBackward | huber_loss_backward | backward | | Gradient of huber_loss.
diopiSoftMarginLoss | soft_margin_loss | | diopiSoftMarginLossBackward | log(1 + exp(-target * input)) for targets +-1.
diopiSoftMarginLossBackward | soft_margin_loss_backward | backward | | Gradient of soft_margin_loss.
diopiMultiMarginLoss | multi_margin_loss | | diopiMultiMarginLossBackward | Multi-class hinge loss with p, margin and class weights.
diopiMultiMarginLossBackward | multi_margin_loss_backward | backward | | Gradient of multi_margin_loss.
diopiMultilabelMarginLoss | multilabel_margin_loss_forward | | diopiMultilabelMarginLossBackward | Multi-label hinge loss with target class lists ended by -1.
diopiMultilabelMarginLossBackward | multilabel_margin_loss_backward | backward | | Gradient of multilabel_margin_loss.
diopiCTCLoss | _ctc_loss | | diopiCTCLossBackward | Connectionist temporal classification loss and its alpha table.
diopiCTCLossBackward | _ctc_loss_backward | backward | | Gradient of ctc_loss with respect to the log probabilities.
"""
