"""PyTorch's OpInfo database as a conformance suite: every float32 op on dipu against CPU.

Each op runs forward and, when it supports autograd, backward (see ``opinfo_harness.py``). Results are
judged by :mod:`diopi.compare`. Known failures are listed with their reasons in
``opinfo_expected_failures.json``: a listed op must keep failing (when it starts passing, remove it from
the list) and an unlisted op must pass. Regenerate the list and the counts in ``docs/opinfo.md`` with
``python tests/torch_dipu/update_opinfo_expectations.py``.
"""

from __future__ import annotations

import opinfo_harness as h
import pytest
from conformance_common import check_expected, expectation_problems

EXPECTED = h.load_expectations()
SUITE = h.suite()
CASES = [
    pytest.param(name, mode, id=f"{name}-{mode}")
    for name in h.conformance_ops()
    for mode in h.MODES
]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_opinfo(name: str, mode: str) -> None:
    check_expected(SUITE, EXPECTED, name, mode)


def test_expectations_name_known_ops() -> None:
    problems = expectation_problems(SUITE, EXPECTED)
    assert not problems, problems
