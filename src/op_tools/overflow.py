"""OpOverflowCheck: find the operator calls that PRODUCE NaN or Inf, forward and backward.

After each call its floating outputs are checked (a single output by its sum, several by one
``diopi::tensor_stats`` reduction; the NaN and Inf counts come from ``device_stats``). Only when an output is
non-finite are the inputs looked at (non-finite Python numbers among the arguments count as
inputs): a call is flagged when its non-finite values are not explained by its inputs.

- NaN in a result is explained by any non-finite input (``inf - inf``, ``0 * inf`` make NaN);
- Inf in a result is explained only by an Inf input (NaN does not turn into Inf; overflow does).

Counts are not compared: broadcasting and reductions spread one NaN over many elements. Inputs of calls that
write into them (in-place names, ``inplace=True``, quiet writers) are reduced before the call; ``out=``
buffers are not inputs. In backward the same rule holds for each input gradient, with the call's output
gradients (and non-finite values of its forward) as the sources.

Each flagged tensor is a ``FAIL`` row of ``<results>/op_overflow_check/<run>/rank<r>/results.jsonl``
(and ``.csv``); the console gets one line per (op name, step) with the number of FAIL rows and the call with
the most NaN and Inf (:mod:`diopi.step_lines`); :meth:`OpOverflowCheck.stop` names the first producer.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

import torch

from diopi.case_format import dtype_name
from diopi.step_lines import StepLines
from diopi.tensor_walk import leaves, tensors_in
from op_tools import config
from op_tools.protocol import OpCall, Phase
from op_tools.results_tool import ResultsTool
from op_tools.tensor_stats import device_stats, tensor_stats

__all__ = ["OpOverflowCheck"]


class _State:
    """What one call keeps between its forward and its backward (no tensors)."""

    __slots__ = ("before", "versions", "fwd_nan", "fwd_inf", "site")

    def __init__(self) -> None:
        self.before: tuple[bool, bool] | None = None  # (NaN, Inf) among the inputs, before the call
        self.versions: list[int] | None = None
        self.fwd_nan = False
        self.fwd_inf = False
        self.site = ""


def _checkable(t: torch.Tensor) -> bool:
    return (t.is_floating_point() or t.is_complex()) and t.numel() > 0


def _scalars(value: Any) -> tuple[bool, bool]:
    """(NaN, Inf) among the Python numbers in ``value`` (nested lists, tuples, dicts)."""
    numbers = [abs(v) for v in leaves(value) if isinstance(v, (float, complex))]
    return (any(math.isnan(n) for n in numbers), any(math.isinf(n) for n in numbers))


def _flags(stats: list[dict[str, Any]]) -> tuple[bool, bool]:
    return (any(s["nan"] for s in stats), any(s["inf"] for s in stats))


def _nonfinite_stats(tensors: list[torch.Tensor]) -> list[dict[str, Any]] | None:
    """Statistics of ``tensors`` when one has NaN or Inf, else None. A single real tensor is first summed:
    a finite sum proves every element finite (NaN and Inf survive addition), at less than half the cost of
    the statistics; a sum that overflows only costs the statistics."""
    if len(tensors) == 1 and tensors[0].is_floating_point():
        t = tensors[0]
        if math.isfinite(float(t.sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32))):
            return None
    stats = device_stats(tensors)
    return stats if any(s["nan"] or s["inf"] for s in stats) else None


def _number(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


class OpOverflowCheck(ResultsTool):
    """Flag the calls whose outputs (forward) or input gradients (backward) have NaN or Inf their inputs
    (output gradients) do not explain.

    Keywords (environment variable in brackets): ``ops``/``disable_ops`` [``OP_OVERFLOW_CHECK_LIST`` /
    ``OP_OVERFLOW_CHECK_DISABLE_LIST``], ``steps`` [``OP_OVERFLOW_CHECK_STEPS``], ``backward`` (also check
    the backward, default True), ``results_dir`` [``OP_TOOLS_RESULTS_DIR``], ``run_id`` [``OP_TOOLS_RUN_ID``],
    ``device`` [``OP_TOOLS_DEVICE``]. :attr:`checked` / :attr:`checked_backward` count the calls checked,
    :attr:`flagged` / :attr:`flagged_backward` those flagged; :attr:`results` are the rows written.
    """

    env_prefix = "OP_OVERFLOW_CHECK"
    steps_env = config.OVERFLOW_CHECK_STEPS_ENV
    results_folder = "op_overflow_check"
    phases = Phase.BEFORE | Phase.AFTER | Phase.BACKWARD
    backward_needs = "finite"  # zero counts from one sum per gradient; statistics only for non-finite ones

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None, backward: bool = True,
                 results_dir: str | os.PathLike[str] | None = None, run_id: str | None = None) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps, results_dir=results_dir,
                         run_id=run_id)
        if not backward:
            self.phases = Phase.BEFORE | Phase.AFTER
        self.lines = StepLines(self.name)  # one console line per (op name, step)
        self.checked = 0
        self.checked_backward = 0
        self.flagged = 0
        self.flagged_backward = 0
        self.first: str | None = None  # the first flagged call, as its console line
        self.by_op: Counter[tuple[str, str]] = Counter()  # (op name, phase) -> flagged calls
        self._writes_inputs: set[str] = set()  # ops seen writing into inputs without saying so

    # -- lifecycle -------------------------------------------------------------------------------------
    def on_stop(self) -> None:
        self.lines.flush()
        super().on_stop()

    def summary_lines(self) -> list[str]:
        return [self.summary()]

    def summary(self) -> str:
        """The first producer, then the counts and the flagged ops."""
        counts = (f"{self.checked} calls checked ({self.checked_backward} backward), "
                  f"{self.flagged + self.flagged_backward} flagged ({self.flagged} forward, "
                  f"{self.flagged_backward} backward)")
        if self.first is None:
            return f"{self.name}: {counts}: no op produced NaN or Inf"
        ops = ", ".join(f"{name} {phase} x{n}" for (name, phase), n in list(self.by_op.items())[:10])
        if len(self.by_op) > 10:
            ops += f", and {len(self.by_op) - 10} more ops"
        return (f"{self.name}: first producer: {self.first.removeprefix(self.name + ': ')}\n"
                f"{self.name}: {counts}: {ops}; results in {self.run_dir}")

    # -- forward ---------------------------------------------------------------------------------------
    def _may_write_inputs(self, call: OpCall) -> bool:
        return call.may_write_inputs(out=False) or call.name in self._writes_inputs

    @staticmethod
    def _input_flags(call: OpCall) -> tuple[bool, bool]:
        """(NaN, Inf) among the call's floating tensor inputs now (``out=`` buffers are not inputs)."""
        out = call.kwargs.get("out") if call.kwargs else None
        skip = {id(t) for t in tensors_in(out, unique=True)} if out is not None else set()
        inputs = [t for t in call.inputs if id(t) not in skip and _checkable(t)]
        return _flags(device_stats(inputs)) if inputs else (False, False)

    def before(self, call: OpCall) -> _State:
        if self.lines.pending:
            self.lines.poll(call.step)
        state = _State()
        if self._may_write_inputs(call):  # their values before the call are gone after it
            state.before = self._input_flags(call)
        else:
            state.versions = [t._version for t in call.inputs]
        return state

    def _checked_outputs(self, call: OpCall) -> list[tuple[int, torch.Tensor]]:
        outputs = call.outputs
        if not outputs and call.info.inplace and call.args:  # ``x[i] = v``, ``torch._foreach_add_``: no result
            outputs = tensors_in(call.args[0], unique=True)
        return [(k, t) for k, t in enumerate(outputs) if _checkable(t)]

    def _input_sources(self, call: OpCall, state: _State) -> tuple[bool, bool]:
        """(NaN, Inf) among the call's inputs as they were when it started, and its Python numbers."""
        nan, inf = _scalars([call.args, call.kwargs])
        if state.before is not None:
            return (nan or state.before[0], inf or state.before[1])
        if state.versions is not None and any(t._version != v for t, v in zip(call.inputs, state.versions,
                                                                                   strict=True)):
            # Written without saying so (``F.relu(x, True)``): the inputs are judged after the call (which
            # can only hide a producer); later calls of the op reduce them before.
            self._writes_inputs.add(call.name)
        n, i = self._input_flags(call)
        return (nan or n, inf or i)

    def after(self, call: OpCall, state: _State, output: Any) -> None:
        if call.info.uninitialized:  # torch.empty's memory may hold any bit pattern, NaN included
            return
        outputs = self._checked_outputs(call)
        if call.backward_hooked:
            state.site = call.call_site  # the frame is gone by the backward pass
        if not outputs:
            return
        self.checked += 1
        stats = _nonfinite_stats([t for _, t in outputs])
        if stats is None:
            return
        state.fwd_nan, state.fwd_inf = _flags(stats)
        src_nan, src_inf = self._input_sources(call, state)
        state.fwd_nan, state.fwd_inf = state.fwd_nan or src_nan, state.fwd_inf or src_inf
        found = [(f"out[{k}]", dtype_name(t.dtype), list(t.shape), s) for (k, t), s in zip(outputs, stats, strict=True)]
        if self._judge(call, "forward", found, src_nan, src_inf, call.call_site):
            self.flagged += 1

    # -- backward --------------------------------------------------------------------------------------
    @staticmethod
    def _grad_stats(grad: Any) -> dict[str, Any] | None:
        if isinstance(grad, dict):
            return grad
        if isinstance(grad, torch.Tensor):  # another active tool asked for host copies
            return {"shape": list(grad.shape), "dtype": dtype_name(grad.dtype), **tensor_stats(grad)}
        return None

    def on_backward(self, call: OpCall, state: _State, grad_inputs: dict[int, Any],
                    grad_outputs: dict[int, Any]) -> None:
        grads = [(i, self._grad_stats(g)) for i, g in sorted(grad_inputs.items())]
        found = [(f"grad_input[{i}]", s["dtype"], s["shape"], s) for i, s in grads if s is not None]
        if not found:
            return
        self.checked_backward += 1
        if not any(s["nan"] or s["inf"] for *_, s in found):
            return
        sources = [s for s in (self._grad_stats(g) for g in grad_outputs.values()) if s is not None]
        src_nan, src_inf = _flags(sources)
        src_nan, src_inf = src_nan or state.fwd_nan, src_inf or state.fwd_inf
        if self._judge(call, "backward", found, src_nan, src_inf, state.site):
            self.flagged_backward += 1

    # -- results ---------------------------------------------------------------------------------------
    def _judge(self, call: OpCall, phase: str, found: list[tuple[str, str, list[int], dict[str, Any]]],
               src_nan: bool, src_inf: bool, site: str) -> bool:
        """Write a row per produced non-finite tensor and note the call for its console line; whether any was."""
        parts = []
        worst = 0
        for index, dtype, shape, s in found:
            nan, inf = s["nan"], s["inf"]
            if not ((nan and not (src_nan or src_inf)) or (inf and not src_inf)):
                continue
            message = f"{nan} NaN, {inf} Inf; finite min {_number(s['min'])}, max {_number(s['max'])}"
            parts.append(f"{index}: {nan} NaN, {inf} Inf")
            worst += nan + inf
            if self.table is not None:
                self.table.add({"id": call.call_id, "name": call.name, "phase": phase, "verdict": "FAIL",
                                "index": index, "step": call.step, "dtype": dtype, "shape": shape,
                                "message": message, "call_site": site, "nan": nan, "inf": inf,
                                "min": s["min"], "max": s["max"]})
        if not parts:
            return False
        if phase == "forward":
            reason = "inputs have NaN but no Inf" if src_nan else "inputs finite"
        else:
            reason = "no Inf in grad_outputs or the forward" if src_nan else "grad_outputs finite"
        detail = f"#{call.call_id} {phase} {'; '.join(parts)} ({reason}) at {site}"
        self.lines.add(call.step, call.name, len(parts), worst, detail)
        if self.first is None:
            self.first = f"{self.name}: {call.name} {detail}"
        self.by_op[(call.name, phase)] += 1
        return True
