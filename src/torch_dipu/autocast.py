"""Autocast for dipu (``torch.autocast("dipu", dtype=torch.bfloat16)``), with CUDA's operator policy.

PyTorch ships autocast kernels for its built-in devices only; a PrivateUse1 backend registers its own
on the ``AutocastPrivateUse1`` key. Every operator passes through (fallthrough) except those listed
below: matmul-like operators run in the autocast dtype, precision-sensitive ones in float32, reductions and
softmax in float32 unless the call gives its own ``dtype`` (CUDA's "set_opt_dtype" policy: ``x.sum()``,
``F.softmax``, ``F.log_softmax`` and so ``F.cross_entropy``), and the mixed-input ones in the widest input
dtype, as ``torch.autocast("cuda")`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "cross_entropy_loss",
)
#: float32 unless the call gives a ``dtype`` (CUDA's fp32_set_opt_dtype policy; ``norm`` is its fp32_append_dtype).
FP32_UNLESS_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "norm.Scalar",
    "norm.ScalarOpt_dim",
)
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "tensordot",
           "scatter_add", "cat", "stack")


def _eligible(t: Any) -> bool:
    return (isinstance(t, torch.Tensor) and t.device.type == "dipu" and t.is_floating_point()
            and t.dtype != torch.float64)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if _eligible(value):
        return value if value.dtype == dtype else value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(values: Any, widest: torch.dtype | None = None) -> torch.dtype | None:
    for v in values:
        if _eligible(v):
            widest = v.dtype if widest is None else torch.promote_types(widest, v.dtype)
        elif isinstance(v, (list, tuple)):
            widest = _widest(v, widest)
    return widest


def _dtype_position(op: torch._ops.OpOverload) -> int | None:
    """Where a positional ``dtype`` argument sits in ``op``'s schema (None: keyword-only or absent)."""
    for i, argument in enumerate(op._schema.arguments):
        if argument.name == "dtype" and not argument.kwarg_only:
            return i
    return None


def _kernel(op: torch._ops.OpOverload, policy: str) -> Callable[..., Any]:
    position = _dtype_position(op)

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            if policy == "lower":
                dtype = torch.get_autocast_dtype("dipu")
            elif policy == "fp32":
                dtype = torch.float32
            elif policy == "fp32_unless_dtype":
                given = kwargs.get("dtype")
                if given is None and position is not None and position < len(args):
                    given = args[position]
                if given is not None:  # an explicit dtype is not eligible for autocast
                    return op(*args, **kwargs)
                dtype = torch.float32 if args and _eligible(args[0]) else None
            else:
                dtype = _widest((*args, *kwargs.values()))
            if dtype is not None:
                args, kwargs = _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return run


def register(lib: torch.library.Library, fallthrough: torch.library.Library) -> None:
    """Register the AutocastPrivateUse1 kernels into ``lib`` (an ``aten`` IMPL library); every other
    operator falls through the autocast key (``fallthrough``: a ``_`` IMPL library)."""
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    for policy, names in (("lower", LOWER_PRECISION), ("fp32", FP32), ("fp32_unless_dtype", FP32_UNLESS_DTYPE),
                          ("promote", PROMOTE)):
        for name in names:
            packet, _, overload = name.partition(".")
            packet_op = getattr(torch.ops.aten, packet, None)
            op = getattr(packet_op, overload or "default", None) if packet_op is not None else None
            if op is None:
                continue
            lib.impl(name, _kernel(op, policy), "AutocastPrivateUse1")
