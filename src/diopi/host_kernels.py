"""Reference implementations for ATen operators that PyTorch's CPU build does not have.

PyTorch's recurrent layers take a fused cell kernel on every device that is not the CPU
(``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell`` and their backward kernels), and only CUDA ships
one. The DIOPI functions serving them (``diopiLstmCell``, ``diopiGruCell``, ...) use these kernels as their
reference: plain tensor arithmetic in the operator's dtype, called like any DIOPI implementation,
``kernel(op, *args, **kwargs)`` on host tensors. The workspace a forward kernel returns is read only by
the matching backward kernel below.

LSTM workspace: the activated gates ``[i, f, g, o]`` (N x 4H). GRU workspace: ``[r, z, n, hx, hn]``
(N x 5H), ``hn`` being the hidden-side new-gate input before it is scaled by ``r``.

``histc`` of an integer tensor has no CPU kernel either, while accelerators (CUDA) take it and MoE code relies
on it (transformers' grouped-mm experts count tokens per expert with ``histc`` of int32 ids off the CPU).
"""

from __future__ import annotations

from typing import Any

import torch


def _with_bias(gates: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return gates if bias is None else gates + bias


def lstm_cell(op: Any, input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
              input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> tuple:
    """``_thnn_fused_lstm_cell``: (hy, cy, workspace)."""
    gates = _with_bias(input_gates, input_bias) + _with_bias(hidden_gates, hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat((i, f, g, o), 1)


def lstm_cell_backward(op: Any, grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None, cx: torch.Tensor,
                       cy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> tuple:
    """``_thnn_fused_lstm_cell_backward_impl``: (grad_gates, grad_cx, grad_bias or None)."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy
    else:
        grad_o = torch.zeros_like(o)
    grad_gates = torch.cat((
        grad_c * g * i * (1 - i),
        grad_c * cx * f * (1 - f),
        grad_c * i * (1 - g * g),
        grad_o * o * (1 - o),
    ), 1)
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


def gru_cell(op: Any, input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
             input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> tuple:
    """``_thnn_fused_gru_cell``: (hy, workspace)."""
    ir, iz, in_ = _with_bias(input_gates, input_bias).chunk(3, 1)
    hr, hz, hn = _with_bias(hidden_gates, hidden_bias).chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat((r, z, n, hx, hn), 1)


def gru_cell_backward(op: Any, grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> tuple:
    """``_thnn_fused_gru_cell_backward``: (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
    grad_hidden_bias); the biases' gradients are None without biases."""
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * r * (1 - r)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_input = torch.cat((grad_r, grad_z, grad_n), 1)
    grad_hidden = torch.cat((grad_r, grad_z, grad_n * r), 1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)


def histc(op: Any, self: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> torch.Tensor:
    """``histc``: PyTorch's CPU kernel for floating-point inputs; integer inputs as CUDA counts them.

    For an integer tensor, ``min``/``max`` are cast to integers, ``min == max`` takes the data's range (widened
    by one on each side when it is a single value), elements outside ``[min, max]`` are ignored and the bin of
    ``v`` is ``(v - min) * bins // (max - min)`` (the last edge belongs to the last bin), in integer arithmetic.
    The result has the input's dtype.
    """
    if self.is_floating_point() or self.is_complex():
        return op._op(self, bins, min, max)
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, but got {bins} for dimension 0")
    values = self.reshape(-1).to(torch.int64)
    low, high = int(min), int(max)
    if low == high and values.numel():
        low, high = int(values.min()), int(values.max())
    if low == high:
        low, high = low - 1, high + 1
    if low > high:
        raise RuntimeError("torch.histc: max must be larger than min")
    values = values[(values >= low) & (values <= high)]
    index = ((values - low) * bins).div(high - low, rounding_mode="floor").clamp_(max=bins - 1)
    return torch.bincount(index, minlength=bins).to(self.dtype)


#: DIOPI function name -> reference kernel, for the functions whose ATen operator has no CPU kernel.
REFERENCES = {
    "diopiLstmCell": lstm_cell,
    "diopiLstmCellBackward": lstm_cell_backward,
    "diopiGruCell": gru_cell,
    "diopiGruCellBackward": gru_cell_backward,
    "diopiHistc": histc,
}
