"""OpAutoCompare: every operator call on the device is re-run on the CPU and judged, forward and backward.

Per call: the inputs are copied to the host before the call runs (so in-place ops are checked against the
originals), the device runs the call, the CPU runs it on the copies in the device's dtype, and every
output is judged by :mod:`diopi.compare` (PASS, NOISE, FAIL). A float64 reference is computed only for
outputs outside the tolerance: within ``noise_factor`` times the CPU's own error against float64 they
are NOISE, else FAIL. Inputs are compared after the call too when the call wrote them (or their version
counter moved): an in-place op that lost its write, or an op that changed an input it should not have.

Backward: each input gradient of every autograd node the call created is checked against a CPU
recomputation of the call's forward and backward, fed with the device's own output gradients.

Random ops and ops without a comparable value are SKIP rows, and so are calls that talk to other ranks
(``torch.distributed`` collectives, calls on distributed tensors: "collective: not compared"), which are never
run again: on every rank of a multi-process run the tool checks that rank's own calls, without deadlocks.

A FAIL saves the case (device inputs and outputs, the CPU outputs as ``reference_outputs``) under ``cases/``
of the run folder, ready for ``run_op_from_data --acc_check``; the console gets one line per (op name, step)
with the number of FAIL rows and the worst one (:mod:`diopi.step_lines`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from diopi import case_format as cf
from diopi.compare import TensorComparison, Verdict, compare_tensors
from diopi.reference import judge_outputs
from diopi.result_table import VERDICT_NAMES
from diopi.step_lines import StepLines
from diopi.tensor_walk import map_leaves, tensors_in
from op_tools import config
from op_tools.capture import op_dir_name
from op_tools.collectives import needs_other_ranks
from op_tools.protocol import OpCall, Phase, print_line
from op_tools.results import process_rank
from op_tools.results_tool import ResultsTool

__all__ = ["OpAutoCompare"]



@dataclass
class _CallState:
    """What one call keeps until its backward pass: host copies of the inputs and their encoding."""

    case: cf.CaseBuilder | None  # the call's arguments with host copies (role ``i``); None once released
    writes: bool
    versions: list[int]
    device_inputs: list[torch.Tensor] | None
    skip: str | None = None
    autocast: bool = False  # autocast was on for the device: the kernel saw inputs cast to its output dtype
    cast_to: torch.dtype | None = None
    outputs_host: Any = None
    reference: tuple[Any, dict[int, torch.Tensor]] | None = None  # CPU outputs and input leaves, for backward
    saved_case: str | None = None


def _host(value: Any) -> Any:
    """``value`` with every tensor replaced by a detached host copy (structure kept)."""
    return map_leaves(value, lambda v: v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v)


class OpAutoCompare(ResultsTool):
    """Compare every matched operator call on the device with the CPU, forward and backward.

    Keywords (environment variable in brackets): ``ops`` / ``disable_ops`` [``OP_AUTOCOMPARE_LIST`` /
    ``OP_AUTOCOMPARE_DISABLE_LIST``], ``steps`` [``OP_AUTOCOMPARE_STEPS``], ``device`` [``OP_TOOLS_DEVICE``],
    ``atol`` / ``rtol`` (override every tolerance; otherwise per dtype and op from
    ``AUTOCOMPARE_ERROR_TOLERANCE*``), ``noise_factor`` (2), ``results_dir`` [``OP_TOOLS_RESULTS_DIR``],
    ``run_id`` [``OP_TOOLS_RUN_ID``], ``max_cases`` [``OP_AUTOCOMPARE_MAX_CASES``, 100]: FAIL cases saved
    per run, ``report`` (write ``report.html`` at stop; default True).

    After :meth:`stop`: :attr:`results` (every row), :attr:`counts` (rows per verdict), :attr:`failures`
    (the FAIL rows in order), :attr:`run_dir`.
    """

    env_prefix = "OP_AUTOCOMPARE"
    read_config = staticmethod(config.autocompare_config)
    steps_env = config.AUTOCOMPARE_STEPS_ENV
    results_folder = "op_autocompare"
    phases = Phase.BEFORE | Phase.AFTER | Phase.BACKWARD
    backward_needs = "data"

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None, atol: float | None = None,
                 rtol: float | None = None, noise_factor: float = 2.0,
                 results_dir: str | os.PathLike[str] | None = None, run_id: str | None = None,
                 max_cases: int | None = None, report: bool = True) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps, results_dir=results_dir,
                         run_id=run_id)
        self.atol, self.rtol, self.noise_factor = atol, rtol, noise_factor
        self.keep_explicit(max_cases=max_cases)
        self.apply_config(self.config)
        self.write_report = report
        self.lines = StepLines(self.name)  # one console line per (op name, step)
        self.cases_saved = 0
        self.calls_checked = 0

    # -- lifecycle -------------------------------------------------------------------------------------
    def apply_config(self, cfg: config.AutoCompareConfig) -> None:
        self.max_cases = self.explicit("max_cases", cfg.max_cases)

    def on_stop(self) -> None:
        self.lines.flush()
        super().on_stop()
        if self.write_report and self.table is not None and self.table.jsonl_path.is_file():
            try:
                from op_tools.report import write_report

                print_line(f"OpAutoCompare: report {write_report(self.run_dir, title='OpAutoCompare')}")
            except Exception as exc:  # a report is a convenience: never fail the run for it
                print_line(f"OpAutoCompare: no HTML report ({type(exc).__name__}: {exc})")

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("verdict") == "FAIL"]

    # -- forward ---------------------------------------------------------------------------------------
    def before(self, call: OpCall) -> _CallState:
        if self.lines.pending:
            self.lines.poll(call.step)
        if call.random:
            return _CallState(None, False, [], None, skip="random op")
        distributed = needs_other_ranks(call.info, call.inputs)
        if distributed is not None:  # a CPU re-run would need the other ranks (a deadlock, a double reduction)
            return _CallState(None, False, [], None, skip=f"{distributed}: not compared")
        if call.info.uninitialized:
            return _CallState(None, False, [], None, skip="no comparable value")
        case = cf.CaseBuilder()
        case.encode_call(call.args, call.kwargs)
        enc = case.encoder("i")
        inputs = list(enc.tensors.values())
        state = _CallState(case, call.may_write_inputs(), [t._version for t in inputs], inputs)
        if enc.opaque:
            state.skip = f"argument not comparable ({', '.join(enc.opaque)})"
        state.autocast = torch.is_autocast_enabled(self.device_type)
        return state

    def after(self, call: OpCall, state: _CallState, output: Any) -> None:
        self.calls_checked += 1
        device_inputs, state.device_inputs = state.device_inputs, None
        if state.skip is not None:
            self._row(call, "forward", "SKIP", "-", message=state.skip)
            return
        actual = _host(output)
        if state.autocast and not state.writes:
            # Autocast casts the floating inputs inside the dispatcher, after this tool saw them; the CPU
            # reference gets the same cast (to the dtype the device produced), whatever CPU autocast's lists say.
            # Calls that write into their inputs (in-place ops, batch norm's running statistics) are never
            # cast by autocast: their reference keeps the dtypes the device had.
            state.cast_to = next((t.dtype for t in tensors_in(actual, unique=True) if t.is_floating_point()),
                                 None)
        try:
            if call.backward_hooked:  # keep the CPU graph: the backward check then only runs autograd.grad
                expected, reference_inputs, leaves = self._graph_reference(call, state)
                state.reference = (expected, leaves)
            else:
                expected, reference_inputs = self._reference(call, state)
        except Exception as exc:
            self._row(call, "forward", "SKIP", "-", message=f"no CPU reference: {type(exc).__name__}: {exc}")
            return
        comparisons = judge_outputs(actual, expected, lambda: self._wide_reference(call, state), op=call.name,
                                    atol=self.atol, rtol=self.rtol, noise_factor=self.noise_factor)
        for j, t in enumerate(device_inputs or []):
            if state.writes or t._version != state.versions[j]:
                key = f"i{j}"
                comparisons.append(compare_tensors(_host(t), reference_inputs[key], op=call.name, atol=self.atol,
                                                   rtol=self.rtol, noise_factor=self.noise_factor,
                                                   path=f"input[{j}] (after)"))
        failed = any(c.verdict == Verdict.FAIL for c in comparisons)
        if failed:
            state.saved_case = self._save_case(call, state, actual, expected, None)
        for c in comparisons:
            self._comparison_row(call, "forward", c, state.saved_case)
        if call.backward_hooked:
            state.outputs_host = actual
        else:
            state.case = None

    def _reference(self, call: OpCall, state: _CallState, wide: bool = False,
                   grad: bool = False) -> tuple[Any, dict[str, torch.Tensor]]:
        """Run the call on the CPU on fresh copies of the inputs (float64 ones with ``wide``)."""
        tensors = {}
        inputs = state.case.encoder("i")
        for key, meta in inputs.meta.items():
            span = inputs.data[key]
            target = None
            if wide and (span.is_floating_point() or span.is_complex()):
                target = torch.complex128 if span.is_complex() else torch.float64
            elif state.cast_to is not None and not grad and span.is_floating_point():
                target = state.cast_to
            if target is not None and target != span.dtype:
                meta = {**meta, "dtype": cf.dtype_name(target)}
                span = span.to(target)
            elif not grad and not state.writes:  # read only: a view of the saved copy will do
                tensors[key] = span.as_strided(meta["shape"], meta["stride"])
                continue
            tensors[key] = cf.rebuild_tensor(meta, span, "cpu")
        device_map = {self.device_type: "cpu"}
        args = cf.decode_value(state.case.args, tensors, device_map)
        kwargs = {k: cf.decode_value(v, tensors, device_map) for k, v in state.case.kwargs.items()}
        if not grad:
            with torch.no_grad():
                return call.func(*args, **kwargs), tensors
        return (args, kwargs), tensors

    def _wide_reference(self, call: OpCall, state: _CallState) -> Any:
        try:
            return self._reference(call, state, wide=True)[0]
        except Exception:  # an op without a float64 CPU kernel: judge by the tolerance alone
            return None

    # -- backward --------------------------------------------------------------------------------------
    def on_backward(self, call: OpCall, state: _CallState, grad_inputs: dict[int, Any],
                    grad_outputs: dict[int, Any]) -> None:
        if state is None or state.skip is not None or state.reference is None or not grad_inputs:
            return
        reference, state.reference = state.reference, None
        try:
            expected = self._reference_grads(reference, grad_inputs, grad_outputs)
        except Exception as exc:
            self._row(call, "backward", "SKIP", "-", message=f"no CPU reference: {type(exc).__name__}: {exc}")
            state.case, state.outputs_host = None, None
            return

        def judge(wide: dict[int, torch.Tensor]) -> list[TensorComparison]:
            return [compare_tensors(grad_inputs[j], ref.to(grad_inputs[j].dtype), expected_fp64=wide.get(j),
                                    op=call.name, atol=self.atol, rtol=self.rtol, noise_factor=self.noise_factor,
                                    path=f"grad_input[{j}]") for j, ref in expected.items()]

        comparisons = judge({})
        if any(c.verdict == Verdict.FAIL for c in comparisons):
            try:
                out, _, leaves = self._graph_reference(call, state, wide=True)
                wide = self._reference_grads((out, leaves), grad_inputs, grad_outputs)
            except Exception:  # no float64 kernel: judge by the tolerance alone
                wide = {}
            comparisons = judge(wide)
            if any(c.verdict == Verdict.FAIL for c in comparisons) and state.saved_case is None:
                state.saved_case = self._save_case(call, state, state.outputs_host, None,
                                                   (grad_inputs, grad_outputs))
        for c in comparisons:
            self._comparison_row(call, "backward", c, state.saved_case)
        state.case, state.outputs_host = None, None

    def _graph_reference(self, call: OpCall, state: _CallState,
                         wide: bool = False) -> tuple[Any, dict[str, torch.Tensor], dict[int, torch.Tensor]]:
        """The CPU forward with autograd: outputs, the tensors the call got (by key) and the floating inputs
        that require grad as leaves (by input index). Each input gets a non-leaf holder (a clone, or the cast
        autocast applies), so in-place ops are allowed and gradients reach the leaf."""
        (args, kwargs), tensors = self._reference(call, state, wide=wide, grad=True)
        meta = state.case.encoder("i").meta
        cast = state.cast_to if not wide else None
        leaves: dict[int, torch.Tensor] = {}
        swap: dict[int, torch.Tensor] = {}
        with torch.enable_grad():
            for key, t in list(tensors.items()):
                floating = t.is_floating_point()
                if meta[key].get("requires_grad") and (floating or t.is_complex()):
                    leaves[int(key[1:])] = t.requires_grad_()
                    holder = t.to(cast, copy=True) if cast is not None and floating else t.clone()
                elif cast is not None and floating and t.dtype != cast:
                    holder = t.to(cast)
                else:
                    continue
                swap[id(t)] = tensors[key] = holder
            args, kwargs = map_leaves((args, kwargs),
                                       lambda v: swap.get(id(v), v) if isinstance(v, torch.Tensor) else v)
            out = call.func(*args, **kwargs)
        return out, tensors, leaves

    @staticmethod
    def _reference_grads(reference: tuple[Any, dict[int, torch.Tensor]], grad_inputs: dict[int, Any],
                         grad_outputs: dict[int, Any]) -> dict[int, torch.Tensor]:
        """Input gradients of the CPU reference graph, fed with the device's output gradients."""
        out, leaves = reference
        outs = tensors_in(out, unique=True)
        roots, grads = [], []
        for k, g in grad_outputs.items():
            if k < len(outs) and outs[k].requires_grad and isinstance(g, torch.Tensor):
                roots.append(outs[k])
                grads.append(g.to(outs[k].dtype))
        order = [j for j in grad_inputs if j in leaves]
        if not roots or not order:
            return {}
        with torch.enable_grad():
            result = torch.autograd.grad(roots, [leaves[j] for j in order], grads, allow_unused=True)
        return {j: r for j, r in zip(order, result, strict=True) if r is not None}

    # -- rows and cases --------------------------------------------------------------------------------
    def _row(self, call: OpCall, phase: str, verdict: str, index: str, **fields: Any) -> None:
        if self.table is None:
            return
        self.table.add({"id": call.call_id, "name": call.name, "phase": phase, "verdict": verdict, "index": index,
                        "step": call.step, "call_site": call.call_site, **fields})

    def _comparison_row(self, call: OpCall, phase: str, c: TensorComparison, case_dir: str | None) -> None:
        verdict = VERDICT_NAMES[c.verdict]
        self._row(call, phase, verdict, c.path, max_abs_diff=c.max_abs_error, max_rel_diff=c.max_rel_error,
                  cosine=c.cosine_similarity, atol=c.atol, rtol=c.rtol, message=c.message,
                  case_dir=case_dir if verdict == "FAIL" else None)
        if verdict == "FAIL":
            where = f"; case {case_dir}" if case_dir else ""
            self.lines.add(call.step, call.name, 1, c.max_abs_error,
                           f"#{call.call_id} {phase} {c.path}: max abs diff {c.max_abs_error:.3g}, max rel diff "
                           f"{c.max_rel_error:.3g}, cosine {c.cosine_similarity:.6f} (atol {c.atol:g}, "
                           f"rtol {c.rtol:g}) at {call.call_site}{where}")

    def _save_case(self, call: OpCall, state: _CallState, actual: Any, expected: Any,
                   grads: tuple[dict[int, Any], dict[int, Any]] | None) -> str | None:
        """Write the failing call as a case (relative folder name), or None past ``max_cases``."""
        if self.run_dir is None or self.cases_saved >= self.max_cases:
            return None
        relative = f"cases/{op_dir_name(call.name)}/{call.call_id}"
        case_dir = self.run_dir / relative
        case = state.case
        device = next((m["device"] for m in case.encoder("i").meta.values()
                       if cf.device_type(m["device"]) == self.device_type), self.device_type)
        outputs = case.encode("o", actual)
        for meta in case.encoder("o").meta.values():
            meta["device"] = device
        reference_outputs = case.encode("r", expected) if expected is not None else None
        data = case.data
        section: dict[str, Any] | None = None
        if grads is not None:
            section = cf.backward_section()
            output_keys = [case.encoder("o").key_of(t) for t in tensors_in(actual, unique=True)]
            for name, by_index, keys in (("grad_inputs", grads[0], None), ("grad_outputs", grads[1], output_keys)):
                for index, g in by_index.items():
                    key = f"i{index}" if keys is None else (keys[index] if index < len(keys) else None)
                    if key is not None and isinstance(g, torch.Tensor):
                        cf.add_gradient(section, data, name, key, g, device)
        record = case.record(
            tool="OpAutoCompare", op=call.name, call_id=call.call_id, step=call.step, rank=process_rank(),
            call_site=call.call_site, device=device, inplace=state.writes, random=call.random, mode="data",
            outputs=outputs, backward=section, reference_outputs=reference_outputs)
        try:
            cf.write_case(case_dir, record, data)
        except OSError as exc:
            print_line(f"OpAutoCompare: could not save {case_dir} ({exc.strerror or exc})")
            return None
        self.cases_saved += 1
        return relative
