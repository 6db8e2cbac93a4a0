"""``DICP_PRECISION_CHECK=1``: each vendor island also runs eagerly (its GraphModule, the same inputs) and every
output is judged by ``diopi.compare``. A FAIL prints one line naming the vendor, the graph kind, the island's
operators and the output (max abs / rel error) and counts a ``precision_mismatches``; the vendor's result is
still the one returned."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

from diopi.compare import Verdict, compare_tensors

from . import report

__all__ = ["check_outputs"]


def check_outputs(vendor: str, kind: str, ops: Sequence[str], island: torch.fx.GraphModule,
                  inputs: Sequence[object], actual: Sequence[torch.Tensor]) -> int:
    """Run ``island`` eagerly on ``inputs`` and compare with the vendor's ``actual`` outputs; returns the
    number of outputs that FAIL (each one printed on stderr and counted)."""
    with torch.no_grad():
        expected = island(*inputs)
    report.count(vendor, "precision_checks")
    failures = 0
    listed = ", ".join(ops[:8]) + (f", ... ({len(ops)} ops)" if len(ops) > 8 else "")
    for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
        result = compare_tensors(a, e, op=ops[-1] if len(ops) == 1 else None, path=f"out[{i}]")
        if result.verdict is Verdict.FAIL:
            failures += 1
            print(f"dicp precision: {vendor} {kind} island [{listed}] out[{i}] FAIL: max abs error "
                  f"{result.max_abs_error:.3g}, max rel error {result.max_rel_error:.3g} ({result.message})",
                  file=sys.stderr, flush=True)
    if len(actual) != len(expected):
        failures += 1
        print(f"dicp precision: {vendor} {kind} island [{listed}] returned {len(actual)} outputs, eager "
              f"{len(expected)}", file=sys.stderr, flush=True)
    if failures:
        report.count(vendor, "precision_mismatches", failures)
    return failures
