"""The onnxgraph vendor's AOTAutograd decomposition table: ATen operators it has no converter for, rewritten by
PyTorch's own decompositions (``torch._decomp``) into operators it converts (backward of layer norm and batch
norm, activations' backward, group norm, a few losses and composites)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import get_decompositions

__all__ = ["DECOMPOSED", "decompositions"]

aten = torch.ops.aten

#: Operators (packets expand to their overloads) the vendor decomposes instead of converting.
DECOMPOSED: list[Any] = [
    aten.native_layer_norm_backward, aten.native_batch_norm_backward, aten.native_group_norm,
    aten.native_group_norm_backward, aten.gelu_backward, aten.silu_backward, aten.leaky_relu_backward,
    aten.hardtanh_backward, aten.softplus, aten.softplus_backward, aten.elu, aten.elu_backward, aten.logsumexp,
    aten.std, aten.addcmul, aten.addcdiv, aten.lerp, aten.hardswish, aten.hardswish_backward, aten.hardsigmoid,
    aten.mse_loss, aten.mse_loss_backward, aten.linalg_vector_norm, aten.glu, aten.mish, aten.log_sigmoid_forward,
    aten.log_sigmoid_backward, aten.native_dropout_backward, aten.roll, aten._unsafe_index, aten.slice_backward,
    aten.select_backward,
]


def decompositions() -> dict[Any, Callable[..., Any]]:
    """ATen overload -> decomposition, for ``Vendor.decompositions`` (and ``make_fx``'s ``decomposition_table``)."""
    return get_decompositions(DECOMPOSED)
