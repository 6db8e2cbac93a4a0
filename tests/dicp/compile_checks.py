"""Judging helpers of dicp's tests (a module of its own: ``conftest`` is not a unique module name)."""

from __future__ import annotations

from typing import Any

from diopi.compare import all_passed, compare_outputs


def assert_same(actual: Any, expected: Any) -> None:
    """``actual`` equals ``expected`` as ``diopi.compare`` judges it (float32 noise allowed)."""
    results = compare_outputs(actual, expected)
    assert all_passed(results), "\n".join(r.message for r in results if r.verdict.value == "FAIL")
