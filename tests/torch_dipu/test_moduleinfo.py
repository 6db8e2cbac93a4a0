"""PyTorch's ModuleInfo database as a conformance suite: every float32 module on dipu against CPU.

Each module runs forward and backward, in train and in eval mode (see ``moduleinfo_harness.py``): a CPU
module moved with ``.to("dipu")`` must hold the same state and compute the same outputs, state updates and
gradients. Results are judged by :mod:`diopi.compare`. Known failures are listed with their reasons in
``moduleinfo_expected_failures.json``: a listed module must keep failing in that mode (when it starts
passing, remove it from the list) and an unlisted one must pass. Regenerate the list and
``docs/moduleinfo.md`` with ``python tests/torch_dipu/update_moduleinfo_expectations.py``.
"""

from __future__ import annotations

import moduleinfo_harness as h
import pytest
from conformance_common import check_expected, expectation_problems

EXPECTED = h.load_expectations()
SUITE = h.suite()
CASES = [
    pytest.param(name, mode, id=f"{name}-{mode}")
    for name in h.conformance_modules()
    for mode in h.MODES
]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_moduleinfo(name: str, mode: str) -> None:
    check_expected(SUITE, EXPECTED, name, mode)


def test_expectations_name_known_modules() -> None:
    problems = expectation_problems(SUITE, EXPECTED)
    assert not problems, problems


@pytest.mark.parametrize(
    ("name", "mode", "fault"),
    [
        ("nn.Linear", "forward-eval", "linear:bias:0.5"),
        ("nn.LSTM", "forward-train", "_thnn_fused_lstm_cell:noise:0.01"),
        ("nn.GRUCell", "backward-train", "_thnn_fused_gru_cell_backward:grad:1.5"),
        ("nn.BatchNorm2d", "forward-train", "native_batch_norm:nan"),
        ("nn.Conv2d", "backward-eval", "convolution_backward:grad:2.0"),
    ],
)
def test_the_run_finds_a_faulty_kernel(name: str, mode: str, fault: str) -> None:
    """The suite can fail: a fault injected into one droplet kernel fails the module that uses it."""
    from torch_dipu.vendors import droplet

    with droplet.switches(faults=fault):
        outcome = h.run_module(name, mode)
    assert outcome.status == "fail", (fault, outcome)
    assert h.run_module(name, mode).status == "pass"
