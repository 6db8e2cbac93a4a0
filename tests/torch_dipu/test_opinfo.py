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

EXPECTED = h.load_expectations()
CASES = [
    pytest.param(name, mode, id=f"{name}-{mode}")
    for name in h.conformance_ops()
    for mode in h.MODES
]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_opinfo(name: str, mode: str) -> None:
    outcome = h.run_op(name, mode)
    expected = EXPECTED.get(name, {}).get(mode)
    if outcome.status == "skip":
        pytest.skip(outcome.reason)
    if expected is not None and outcome.status == "pass":
        pytest.fail(
            f"{name} {mode} now passes but is listed as failing ({expected!r}): remove it from "
            f"{h.EXPECTATIONS.name} (or run update_opinfo_expectations.py {name})"
        )
    if expected is None and outcome.status == "fail":
        pytest.fail(f"{name} {mode} fails on dipu: {outcome.reason}")


def test_expectations_name_known_ops() -> None:
    stale = sorted(set(EXPECTED) - set(h.conformance_ops()))
    assert not stale, f"{h.EXPECTATIONS.name} lists ops that are no longer in the OpInfo suite: {stale}"
    bad = sorted(n for n, modes in EXPECTED.items() if not modes or set(modes) - set(h.MODES))
    assert not bad, f"{h.EXPECTATIONS.name}: entries need a non-empty {{'forward'|'backward': reason}}: {bad}"
