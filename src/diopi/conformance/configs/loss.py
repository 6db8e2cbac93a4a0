"""Conformance cases of the loss family; backward functions are recorded from their forward configs.

``reduction`` is ATen's enum: 0 none, 1 mean, 2 sum."""

from __future__ import annotations

import torch

from diopi.conformance.spec import Config, Input, Values

F32_BF16 = (torch.float32, torch.bfloat16)
F32_64 = (torch.float32, torch.float64)
REDUCTIONS = [0, 1, 2]

#: Input and target of the same shape: empty, small, 3-D, "large".
PAIR_SHAPES = [((0,), (0,)), ((4, 5), (4, 5)), ((2, 3, 4), (2, 3, 4)), ((32, 48), (32, 48))]
#: Class scores (N, C) or (C,) with class-index targets.
CLASS_SHAPES = [((0, 4), (0,)), ((6,), ()), ((5, 4), (5,)), ((64, 10), (64,))]
NO_GRAD_INDEX = Input(torch.int64, Values("index", high="dim:-1"), grad=False)


NORMAL = Values()


def pointwise(function: str, op: str, *, values: Values = NORMAL, target: Values = NORMAL,
              dtypes: tuple = F32_BF16, params: dict | None = None, note: str = "") -> Config:
    """A loss of two same-shaped tensors over :data:`PAIR_SHAPES` and every reduction."""
    return Config(function, op=op, inputs={"self": Input(values=values), "target": Input(values=target, grad=False)},
                  shapes=list(PAIR_SHAPES), dtypes=dtypes, params={"reduction": REDUCTIONS, **(params or {})},
                  note=note)


CONFIGS: list[Config] = [
    Config("diopiCrossEntropyLoss", op="cross_entropy_loss.default",
           inputs={"self": Input(), "target": NO_GRAD_INDEX}, shapes=list(CLASS_SHAPES), dtypes=F32_BF16,
           params={"reduction": [1], "label_smoothing": [0.0, 0.1]}),
    Config("diopiCrossEntropyLoss", op="cross_entropy_loss.default",
           inputs={"self": Input(), "target": NO_GRAD_INDEX, "weight": Input(values=Values("positive"), grad=False)},
           shapes=[((5, 4), (5,), (4,)), ((3, 4, 2, 2), (3, 2, 2), (4,))], dtypes=(torch.float32,),
           params={"reduction": [1], "ignore_index": [-100, 1]}, note="class weights, an ignored class"),
    Config("diopiCrossEntropyLoss", op="cross_entropy_loss.default",
           inputs={"self": Input(), "target": Input(values=Values("probability"), grad=False)},
           shapes=[((5, 4), (5, 4)), ((64, 10), (64, 10))], dtypes=(torch.float32,),
           params={"reduction": [1, 0], "label_smoothing": [0.2]}, note="class probabilities as targets"),
    Config("diopiNLLLoss", op="nll_loss_forward.default",
           inputs={"self": Input(), "target": NO_GRAD_INDEX, "weight": Input(values=Values("positive"), grad=False)},
           shapes=[((0, 4), (0,), (4,)), ((6,), (), (6,)), ((5, 4), (5,), (4,)), ((64, 10), (64,), (10,))],
           dtypes=F32_BF16, params={"weight=None": [True, False], "reduction": [1], "ignore_index": [-100]}),
    Config("diopiNLLLoss", op="nll_loss_forward.default",
           inputs={"self": Input(), "target": NO_GRAD_INDEX, "weight": Input(values=Values("positive"), grad=False)},
           shapes=[((5, 4), (5,), (4,))], dtypes=(torch.float32,),
           params={"weight=None": [True], "reduction": [2, 0], "ignore_index": [2]}, note="an ignored class"),
    Config("diopiNLLLoss", op="nll_loss2d_forward.default",
           inputs={"self": Input(), "target": Input(torch.int64, Values("integer", 0, 3), grad=False),
                   "weight": Input(values=Values("positive"), grad=False)},
           shapes=[((2, 3, 4, 5), (2, 4, 5), (3,)), ((1, 3, 16, 16), (1, 16, 16), (3,))], dtypes=F32_BF16,
           params={"weight=None": [True, False], "reduction": [1], "ignore_index": [-100]}),
    Config("diopiNLLLossBackward", from_forward="diopiNLLLoss"),
    pointwise("diopiMSELoss", "mse_loss.default"),
    Config("diopiMSELossBackward", from_forward="diopiMSELoss"),
    Config("diopiBCELoss", op="binary_cross_entropy.default",
           inputs={"self": Input(values=Values("uniform", 0.02, 0.98)),
                   "target": Input(values=Values("probability"), grad=False),
                   "weight": Input(values=Values("positive"), grad=False)},
           shapes=[((0,), (0,), (0,)), ((4, 5), (4, 5), (4, 5)), ((32, 48), (32, 48), (32, 48))],
           dtypes=F32_BF16, params={"weight=None": [True, False], "reduction": [1, 0]}),
    Config("diopiBCELossBackward", from_forward="diopiBCELoss"),
    Config("diopiBCEWithLogitsLoss", op="binary_cross_entropy_with_logits.default",
           inputs={"self": Input(values=Values("normal", -10, 10)),
                   "target": Input(values=Values("probability"), grad=False),
                   "weight": Input(values=Values("positive"), grad=False),
                   "pos_weight": Input(values=Values("positive"), grad=False)},
           shapes=[((0, 5), (0, 5), (5,), (5,)), ((4, 5), (4, 5), (4, 5), (5,)),
                   ((32, 48), (32, 48), (48,), (48,))],
           dtypes=F32_BF16, params={"weight=None": [True, False], "pos_weight=None": [True, False],
                                    "reduction": [1]}),
    pointwise("diopiSmoothL1Loss", "smooth_l1_loss.default", params={"beta": [0.5]}),
    Config("diopiSmoothL1LossBackward", from_forward="diopiSmoothL1Loss"),
    pointwise("diopiHuberLoss", "huber_loss.default", params={"delta": [0.5]}),
    Config("diopiHuberLossBackward", from_forward="diopiHuberLoss"),
    pointwise("diopiSoftMarginLoss", "soft_margin_loss.default", target=Values("integer", -1, 2),
              note="targets -1, 0, 1 (0 is outside the usual +-1 but defined)"),
    Config("diopiSoftMarginLossBackward", from_forward="diopiSoftMarginLoss"),
    Config("diopiMultiMarginLoss", op="multi_margin_loss.default",
           inputs={"self": Input(), "target": NO_GRAD_INDEX, "weight": Input(values=Values("positive"), grad=False)},
           shapes=[((6,), (), (6,)), ((5, 4), (5,), (4,)), ((64, 10), (64,), (10,))], dtypes=(torch.float32,),
           params={"p": [1, 2], "margin": [0.5], "weight=None": [True, False], "reduction": [1]}),
    Config("diopiMultiMarginLoss", op="multi_margin_loss.default",
           inputs={"self": Input(), "target": NO_GRAD_INDEX},
           shapes=[((5, 4), (5,))], dtypes=F32_64, params={"reduction": [0, 2]}),
    Config("diopiMultiMarginLossBackward", from_forward="diopiMultiMarginLoss"),
    Config("diopiMultilabelMarginLoss", op="multilabel_margin_loss_forward.default",
           inputs={"self": Input(), "target": Input(torch.int64, Values("integer", -1, 5), grad=False)},
           shapes=[((5,), (5,)), ((4, 5), (4, 5)), ((64, 5), (64, 5))], dtypes=F32_64,
           params={"reduction": REDUCTIONS}, note="targets: class lists ended by -1"),
    Config("diopiMultilabelMarginLossBackward", from_forward="diopiMultilabelMarginLoss"),
    *(Config("diopiCTCLoss", op="_ctc_loss.default",
             inputs={"log_probs": Input(values=Values("normal", -4, 0)),
                     "targets": Input(torch.int64, Values("integer", 1 if blank == 0 else 0, high), grad=False)},
             shapes=[shapes], dtypes=F32_64,
             params={"input_lengths": [input_lengths], "target_lengths": [target_lengths], "blank": [blank],
                     "zero_infinity": zero_infinity}, note=note)
      for shapes, high, input_lengths, target_lengths, blank, zero_infinity, note in (
          (((12, 2, 5), (2, 4)), 5, [12, 12], [4, 4], 0, [False],
           "full lengths only: log_alpha (the second output) is left unwritten past each sample's lengths"),
          (((30, 3, 8), (3, 6)), 7, [30, 30, 30], [6, 6, 6], 7, [False], "the last class as blank"),
          (((10, 1, 5), (1, 0)), 5, [10], [0], 0, [False], "an empty target"),
          (((6, 1, 3), (1, 5)), 3, [6], [5], 0, [False, True],
           "repeated labels may not fit the frames: an infinite loss, zeroed with zero_infinity"))),
    Config("diopiCTCLossBackward", from_forward="diopiCTCLoss", dtypes=F32_64),
]
