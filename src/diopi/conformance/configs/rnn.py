"""Conformance cases of the rnn family: the fused LSTM/GRU cells and their backward kernels.

PyTorch's CPU build has no kernel for these operators (``nn.LSTMCell`` on the CPU runs unfused ``mm``/``sigmoid``
calls), so no ``call=`` or ``from_forward=`` run on the CPU reaches them: every config calls the operator with
explicit inputs, and the reference is :mod:`diopi.host_kernels`. Gate inputs are pre-activation values; a
workspace holds activated gates, so it is drawn in (0, 1).
"""

from __future__ import annotations

import torch

from diopi.conformance.spec import Config, Input, Values

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
GATE = Values("normal", -3, 3)
ACTIVATED = Values("uniform", 0.0, 1.0)


def _gates(n: int, h: int, k: int, state: int = 1) -> tuple[tuple[int, ...], ...]:
    """Shapes of (input gates, hidden gates, cell/hidden state, input bias, hidden bias) for batch ``n``,
    hidden size ``h`` and ``k`` gates."""
    return (n, k * h), (n, k * h), (n, state * h), (k * h,), (k * h,)


def _cell(function: str, op: str, state: str, k: int) -> Config:
    """A fused cell with ``k`` gates: pre-activation gates, its ``state`` input and optional biases."""
    return Config(function, op=op, inputs={"input_gates": Input(), "hidden_gates": Input(),
                                           state: Input(values=Values("normal")), "input_bias": Input(),
                                           "hidden_bias": Input()},
                  shapes=[_gates(3, 4, k), _gates(1, 1, k), _gates(0, 2, k), _gates(16, 32, k)],
                  params={"input_bias=None": [False, True], "hidden_bias=None": [False, True]}, dtypes=DTYPES,
                  values=GATE)

CONFIGS = [
    _cell("diopiLstmCell", "_thnn_fused_lstm_cell.default", "cx", 4),
    Config(
        "diopiLstmCellBackward", op="_thnn_fused_lstm_cell_backward_impl.default",
        inputs={"grad_hy": Input(values=Values("normal")), "grad_cy": Input(values=Values("normal")),
                "cx": Input(values=Values("normal")), "cy": Input(values=Values("normal")),
                "workspace": Input()},
        shapes=[((3, 4), (3, 4), (3, 4), (3, 4), (3, 16)), ((1, 1), (1, 1), (1, 1), (1, 1), (1, 4)),
                ((0, 2), (0, 2), (0, 2), (0, 2), (0, 8)), ((16, 32), (16, 32), (16, 32), (16, 32), (16, 128))],
        params={"has_bias": [True, False], "grad_cy=None": [False, True]},
        dtypes=DTYPES, values=ACTIVATED,
    ),
    _cell("diopiGruCell", "_thnn_fused_gru_cell.default", "hx", 3),
    Config(
        "diopiGruCellBackward", op="_thnn_fused_gru_cell_backward.default",
        inputs={"grad_hy": Input(values=Values("normal")), "workspace": Input()},
        shapes=[((3, 4), (3, 20)), ((1, 1), (1, 5)), ((0, 2), (0, 10)), ((16, 32), (16, 160))],
        params={"has_bias": [True, False]},
        dtypes=DTYPES, values=ACTIVATED,
        note="the workspace is (r, z, n, hx, hn), activated gates and states; drawn in (0, 1) for all five",
    ),
]
