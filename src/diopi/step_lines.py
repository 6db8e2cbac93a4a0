"""Console lines of the checking tools (OpAutoCompare, OpOverflowCheck, torch_dipu's device auto-compare): one
line per (op name, step).

A fault that persists makes the same finding at every call of an op (45 FAIL rows per W1 training step for
one faulty ``mm``); the results files keep every row, the console gets one line per op and step::

    OpAutoCompare: step 3: torch.nn.functional.linear: 45 FAIL (worst: #17 forward out: max abs diff 0.52, ...)
    OpOverflowCheck: step 1: torch.log: 2 FAIL (worst: #5 forward out[0]: 20 NaN, 0 Inf (inputs finite) at ...)

Format: ``<tool>: step <step>: <op name>: <n> FAIL (worst: <detail>)`` where ``<n>`` counts the FAIL rows of
that op in that step (forward and backward together, as in ``results.jsonl``) and ``<detail>`` is the worst
finding as the tool describes it (its call id, phase and tensor first): for OpAutoCompare the comparison
with the largest max abs diff (NaN counts as the largest), for OpOverflowCheck the call with the most NaN
and Inf elements. The lines of a step are printed, in the order the ops first failed, at the first call the
tool sees in a later step (:meth:`StepLines.poll`) and, for what is still pending, at the tool's stop
(:meth:`StepLines.flush`). Nothing is done per call while nothing failed.
"""

from __future__ import annotations

import math

from diopi.result_table import print_line

__all__ = ["StepLines"]


class _Group:
    __slots__ = ("count", "severity", "detail")

    def __init__(self, count: int, severity: float, detail: str) -> None:
        self.count, self.severity, self.detail = count, severity, detail


class StepLines:
    """Collects a tool's findings per (step, op name) and prints one line per group (format: module doc)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.pending: dict[tuple[int, str], _Group] = {}
        self._oldest = 0  # the earliest step pending (valid while ``pending`` is not empty)
        self.printed = 0  # lines printed so far

    def add(self, step: int, name: str, count: int, severity: float, detail: str) -> None:
        """``count`` FAIL rows of ``name`` in ``step``; ``detail`` describes them and is kept when its
        ``severity`` is the group's largest so far (NaN ranks above everything)."""
        if math.isnan(severity):
            severity = math.inf
        if not self.pending or step < self._oldest:
            self._oldest = step
        group = self.pending.get((step, name))
        if group is None:
            self.pending[(step, name)] = _Group(count, severity, detail)
            return
        group.count += count
        if severity > group.severity:
            group.severity, group.detail = severity, detail

    def poll(self, step: int) -> None:
        """Print the groups of the steps before ``step`` (call at each call the tool sees; cheap)."""
        if self.pending and step > self._oldest:
            self.flush(before=step)

    def flush(self, before: int | None = None) -> None:
        """Print the pending groups (only those of steps before ``before`` when given), oldest step first."""
        keys = sorted((k for k in self.pending if before is None or k[0] < before), key=lambda k: k[0])
        for key in keys:
            group = self.pending.pop(key)
            print_line(f"{self.tool}: step {key[0]}: {key[1]}: {group.count} FAIL (worst: {group.detail})")
            self.printed += 1
        if self.pending:
            self._oldest = min(k[0] for k in self.pending)
