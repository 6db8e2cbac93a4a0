"""Compare two module dumps (``ditorch.module_dump/1``) entry by entry and name the first divergent module.

``compare_runs(ref, test, fp64=None)`` aligns the entries of the two dumps by (module path, step, call,
direction), with fuzzy alignment when the module trees differ (wrapper prefixes stripped, then the remaining
modules matched by class and order), judges every tensor with :mod:`diopi.compare` (the float64 dump, when
given, is the noise floor) and finds the first divergence in forward and in backward order.
"""

from __future__ import annotations

import difflib
import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from diopi.case_format import atomic_open
from diopi.compare import TensorComparison, Verdict, compare_tensors, tolerance, worst_verdict

from .compare_html import write_comparison_page
from .dump_reader import Dump, load_dump

__all__ = ["EntryComparison", "RunComparison", "compare_runs"]

#: Path components that wrappers insert anywhere in a module tree (torch.compile, FSDP, activation checkpointing).
WRAPPER_COMPONENTS = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
#: Root classes whose one child ``module`` is the real model (DDP, DataParallel and the like).
WRAPPER_ROOTS = frozenset({"DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "OptimizedModule"})
_STATS = ("mean", "norm", "min", "max")


def _as_dump(value: str | Path | Dump) -> Dump:
    return value if isinstance(value, Dump) else load_dump(value)


# -- alignment -------------------------------------------------------------------------------------------------
def _strip_leading_module(modules: dict[str, str]) -> bool:
    """Whether this tree's leading ``module.`` is a DDP-style wrapper prefix."""
    children = [p for p in modules if p and "." not in p]
    return modules.get("") in WRAPPER_ROOTS or children == ["module"]


def canonical_path(path: str, strip_module: bool) -> str:
    """``path`` without wrapper components (and without a leading ``module`` when ``strip_module``)."""
    parts = [p for p in path.split(".") if p and p not in WRAPPER_COMPONENTS] if path else []
    if strip_module and parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts)


def _canonical_map(dump: Dump) -> tuple[dict[str, str], list[str]]:
    """Raw path -> canonical path; where several raw paths collapse into one, the innermost (longest) keeps it
    and the others (the wrappers) are returned separately."""
    strip = _strip_leading_module(dump.modules)
    owner: dict[str, str] = {}
    for raw in dump.modules:
        canon = canonical_path(raw, strip)
        if canon not in owner or len(raw) > len(owner[canon]):
            owner[canon] = raw
    mapping = {raw: canon for canon, raw in owner.items()}
    wrappers = [raw for raw in dump.modules if raw not in mapping]
    return mapping, wrappers


def _param_shapes(dump: Dump) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """Each module's parameter names and shapes, from its first forward entry."""
    out: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for entry in dump.forward:
        if entry["module"] not in out:
            out[entry["module"]] = sorted((k, tuple(v.get("shape", ()))) for k, v in entry["tensors"].items()
                                          if k.startswith("param."))
    return out


@dataclass
class Alignment:
    """How the modules of the two dumps were paired: test path -> (reference path, how)."""

    pairs: dict[str, tuple[str, str]] = field(default_factory=dict)
    unaligned_ref: list[str] = field(default_factory=list)
    unaligned_test: list[str] = field(default_factory=list)
    wrappers_ref: list[str] = field(default_factory=list)
    wrappers_test: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return dict(Counter(how for _, how in self.pairs.values()))

    def to_json(self) -> dict[str, Any]:
        return {"counts": self.counts(), "pairs": {t: {"ref": r, "how": h} for t, (r, h) in self.pairs.items()},
                "unaligned_ref": self.unaligned_ref, "unaligned_test": self.unaligned_test,
                "wrappers_ref": self.wrappers_ref, "wrappers_test": self.wrappers_test}


def align_modules(ref: Dump, test: Dump) -> Alignment:
    """Pair the modules of ``test`` with those of ``ref``: the same path and class (``exact``), the same path
    once wrapper prefixes are stripped (``wrapper``), then the rest by class and order (``class-order``, the
    parameters' shapes must agree). :class:`ValueError` "nothing aligns" with the closest candidates."""
    ref_map, ref_wrappers = _canonical_map(ref)
    test_map, test_wrappers = _canonical_map(test)
    ref_by_canon = {c: r for r, c in ref_map.items()}
    result = Alignment(wrappers_ref=ref_wrappers, wrappers_test=test_wrappers)
    left_test: list[str] = []
    for raw, canon in test_map.items():
        other = ref_by_canon.get(canon)
        if other is not None and ref.modules.get(other) == test.modules.get(raw):
            result.pairs[raw] = (other, "exact" if other == raw else "wrapper")
        else:
            left_test.append(raw)
    used = {r for r, _ in result.pairs.values()}
    left_ref = [raw for raw in ref_map if raw not in used]
    ref_shapes, test_shapes = _param_shapes(ref), _param_shapes(test)
    for raw in list(left_test):
        cls, shapes = test.modules.get(raw), test_shapes.get(raw, [])
        match = next((r for r in left_ref if ref.modules.get(r) == cls and ref_shapes.get(r, []) == shapes), None)
        if match is not None:
            result.pairs[raw] = (match, "class-order")
            left_ref.remove(match)
            left_test.remove(raw)
    result.unaligned_ref, result.unaligned_test = left_ref, left_test
    if not result.pairs:
        raise ValueError(_nothing_aligns(ref, test))
    return result


def _nothing_aligns(ref: Dump, test: Dump) -> str:
    ref_names = [f"{p or '<root>'} ({c})" for p, c in ref.modules.items()]
    test_names = [f"{p or '<root>'} ({c})" for p, c in test.modules.items()]
    close = []
    for name in ref_names[:8]:
        best = difflib.get_close_matches(name, test_names, n=2, cutoff=0.0)
        if best:
            close.append(f"{name} ~ {' / '.join(best)}")
    return (f"nothing aligns between the reference dump {ref.path} (root {ref.root}, {len(ref.modules)} modules) and "
            f"the test dump {test.path} (root {test.root}, {len(test.modules)} modules): no module has the same path "
            f"and class, or the same class and parameter shapes; closest candidates: " + "; ".join(close))


# -- judging ---------------------------------------------------------------------------------------------------
def _dtype(name: str | None) -> torch.dtype:
    value = getattr(torch, str(name), None)
    return value if isinstance(value, torch.dtype) else torch.float32


def _coarser(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The dtype with the looser tolerance (the one a mixed comparison is held to)."""
    return a if tolerance(a)[1] >= tolerance(b)[1] else b


def _fail(name: str, message: str) -> TensorComparison:
    return TensorComparison(path=name, verdict=Verdict.FAIL, max_abs_error=math.inf, max_rel_error=math.inf,
                            cosine_similarity=math.nan, mismatch_ratio=1.0, atol=0.0, rtol=0.0, error_vs_fp64=None,
                            cpu_error_vs_fp64=None, message=f"FAIL {name}: {message}")


def _stat_vector(stats: dict[str, Any]) -> torch.Tensor:
    return torch.tensor([math.nan if stats.get(k) is None else float(stats[k]) for k in _STATS], dtype=torch.float64)


def compare_stats(name: str, test: dict[str, Any], ref: dict[str, Any], fp64: dict[str, Any] | None = None,
                  precision: torch.dtype | None = None) -> TensorComparison:
    """Judge one tensor by its statistics (mean, norm, min, max) with :func:`diopi.compare.compare_tensors`,
    at the tolerance of the tensor's dtype (or of ``precision``, the coarser run's, when it is coarser); NaN/Inf
    counts, shapes and dtypes must agree."""
    for key in ("shape", "nan", "inf"):
        if test.get(key) != ref.get(key):
            return _fail(name, f"{key} differs: test {test.get(key)}, reference {ref.get(key)} (statistics)")
    dtype = _coarser(_dtype(test.get("dtype")), _dtype(ref.get("dtype")))
    if not (dtype.is_floating_point or dtype.is_complex):
        if test.get("dtype") != ref.get("dtype"):
            return _fail(name, f"dtype differs: test {test.get('dtype')}, reference {ref.get('dtype')}")
        return compare_tensors(torch.zeros(1), torch.zeros(1), path=name)  # nothing but dtype/shape to compare
    atol, rtol = tolerance(dtype)
    if precision is not None and _coarser(precision, dtype) is precision and precision != dtype:
        dtype = precision
    if test.get("dtype") != ref.get("dtype") or dtype != _dtype(ref.get("dtype")):
        scale = max(abs(float(ref.get(k) or 0.0)) for k in ("min", "max"))
        atol, rtol = _mixed_tolerance(dtype, scale)
    reference = _stat_vector(fp64) if fp64 is not None and fp64.get("shape") == ref.get("shape") else None
    result = compare_tensors(_stat_vector(test), _stat_vector(ref), expected_fp64=reference, atol=atol, rtol=rtol,
                             path=name)
    return replace(result, message=result.message + f" (statistics {'/'.join(_STATS)} only)")


def _mixed_tolerance(dtype: torch.dtype, scale: float) -> tuple[float, float]:
    """The tolerance of a comparison across dtypes: ``dtype``'s, with ``atol`` raised to ``rtol`` times the
    tensor's largest magnitude (a run in a coarser dtype carries errors relative to the tensor's scale, not
    to each element)."""
    atol, rtol = tolerance(dtype)
    return (max(atol, rtol * scale) if math.isfinite(scale) else atol), rtol


def compare_full(name: str, test: torch.Tensor, ref: torch.Tensor, fp64: torch.Tensor | None,
                 precision: torch.dtype | None = None) -> TensorComparison:
    """Judge one tensor against the reference (cast to the coarser dtype when they differ: that dtype's
    tolerance, with the float64 tensor as the noise floor). ``precision``: the coarser run's working dtype (a
    bfloat16 run against a float32 one); a tensor both runs hold in a finer dtype (a float32 loss computed
    from bfloat16 logits) is judged at its tolerance too."""
    note, atol, rtol = "", None, None
    floating = test.is_floating_point() and ref.is_floating_point()
    if (floating and test.dtype == ref.dtype and precision is not None and precision != test.dtype
            and _coarser(precision, test.dtype) is precision):
        atol, rtol = _mixed_tolerance(precision, ref.detach().abs().max().item() if ref.numel() else 0.0)
        note = (f" (a {str(precision).removeprefix('torch.')} run: judged at its tolerance, atol = rtol x the "
                "largest reference value)")
    elif test.dtype != ref.dtype and floating:
        common = _coarser(test.dtype, ref.dtype)
        atol, rtol = _mixed_tolerance(common, ref.detach().abs().max().item() if ref.numel() else 0.0)
        note = (f" (reference {str(ref.dtype).removeprefix('torch.')} compared as "
                f"{str(common).removeprefix('torch.')}, atol = rtol x the largest reference value)")
        test, ref = test.to(common), ref.to(common)
    result = compare_tensors(test, ref, expected_fp64=fp64, atol=atol, rtol=rtol, path=name)
    return replace(result, message=result.message + note) if note else result


@dataclass
class EntryComparison:
    """One aligned module call in one direction: every tensor's comparison."""

    module: str
    ref_module: str
    cls: str
    step: int
    call: int
    direction: str
    alignment: str
    tensors: dict[str, TensorComparison]
    test_stats: dict[str, Any]
    ref_stats: dict[str, Any]

    @property
    def verdict(self) -> Verdict | None:
        return worst_verdict(r.verdict for r in self.tensors.values())

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "ref_module": self.ref_module, "class": self.cls, "step": self.step,
                "call": self.call, "direction": self.direction, "alignment": self.alignment,
                "verdict": self.verdict.value if self.verdict else None,
                "tensors": {n: _result_json(r) | {"test": self.test_stats.get(n), "ref": self.ref_stats.get(n)}
                            for n, r in self.tensors.items()}}


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _result_json(r: TensorComparison) -> dict[str, Any]:
    return {"verdict": r.verdict.value, "max_abs_diff": _num(r.max_abs_error), "max_rel_diff": _num(r.max_rel_error),
            "cosine": _num(r.cosine_similarity), "mismatch_ratio": _num(r.mismatch_ratio),
            "error_vs_fp64": _num(r.error_vs_fp64), "ref_error_vs_fp64": _num(r.cpu_error_vs_fp64),
            "message": r.message}


def _is_ancestor(a: EntryComparison, b: EntryComparison) -> bool:
    """Whether ``a``'s module holds ``b``'s (same step)."""
    return a.step == b.step and a.module != b.module and (a.module == "" or b.module.startswith(a.module + "."))


_Event = tuple[EntryComparison, str, "EntryComparison | None"]  # entry, "start" or "end", the enclosing call


def _forward_events(entries: list[EntryComparison]) -> list[_Event]:
    """Forward entries as events in time: ``start`` (inputs, parameters) when the call begins and ``end``
    (outputs) when it returns, reconstructed from the start order and the module nesting."""
    events: list[_Event] = []
    stack: list[EntryComparison] = []
    for entry in entries:
        while stack and not _is_ancestor(stack[-1], entry):
            events.append((stack.pop(), "end", stack[-1] if stack else None))
        events.append((entry, "start", stack[-1] if stack else None))
        stack.append(entry)
    while stack:
        events.append((stack.pop(), "end", stack[-1] if stack else None))
    return events


def _backward_events(entries: list[EntryComparison]) -> list[_Event]:
    """Backward entries (in the order their backward finished) as events: ``start`` (grad_output) and ``end``
    (grad_param, grad_input); a call's backward holds the calls of its submodules finished just before it."""
    done: list[tuple[EntryComparison, list[Any]]] = []
    for entry in entries:
        children: list[Any] = []
        while done and _is_ancestor(entry, done[-1][0]):
            children.insert(0, done.pop())
        done.append((entry, children))
    events: list[_Event] = []

    def emit(node: tuple[EntryComparison, list[Any]], parent: EntryComparison | None) -> None:
        events.append((node[0], "start", parent))
        for child in node[1]:
            emit(child, node[0])
        events.append((node[0], "end", parent))

    for node in done:
        emit(node, None)
    return events


_PHASES = {("forward", "start"): ("input.", "param."), ("forward", "end"): ("output.",),
           ("backward", "start"): ("grad_output.",), ("backward", "end"): ("grad_param.", "grad_input.")}
_INCOMING = ("input.", "grad_output.")


def _enclosing(entry: EntryComparison, events: list[_Event]) -> EntryComparison | None:
    """The call holding ``entry`` when the event order does not show it (a backward hook that fired early
    because the module's inputs need no gradient): the innermost ancestor module, when it has one call."""
    ancestors = {e.module: e for e, _, _ in events if _is_ancestor(e, entry)}
    if not ancestors:
        return None
    inner = max(ancestors, key=len)
    calls = {e.call for e, _, _ in events if e.module == inner and e.step == entry.step}
    return ancestors[inner] if len(calls) == 1 else None


def _first_fail(events: list[_Event]) -> dict[str, Any] | None:
    """The first FAIL tensor in time. A call whose incoming tensors (inputs, or output gradients) are the first
    to differ got them wrong from the code of the call that holds it: that call is named, with ``seen_in``."""
    for entry, phase, parent in events:
        for prefix in _PHASES[entry.direction, phase]:
            for name, r in entry.tensors.items():
                if not (name.startswith(prefix) and r.verdict is Verdict.FAIL):
                    continue
                if prefix in _INCOMING and parent is None:
                    parent = _enclosing(entry, events)
                blamed = parent if parent is not None and prefix in _INCOMING else entry
                found = {"module": blamed.module, "ref_module": blamed.ref_module, "class": blamed.cls,
                         "step": blamed.step, "call": blamed.call, "direction": blamed.direction, "tensor": name,
                         "alignment": blamed.alignment} | _result_json(r)
                if blamed is not entry:
                    found["seen_in"] = {"module": entry.module, "call": entry.call, "class": entry.cls}
                return found
    return None


@dataclass
class RunComparison:
    """The comparison of two dumps: per-entry results, the alignment and the first divergences."""

    ref_path: str
    test_path: str
    fp64_path: str | None
    stats_only: bool
    steps: list[int]
    alignment: Alignment
    forward: list[EntryComparison]
    backward: list[EntryComparison]
    unmatched_entries: list[dict[str, Any]]
    modules: dict[str, str]
    fixed_input: list[EntryComparison] = field(default_factory=list)
    fixed_input_reference: str | None = None
    fixed_input_failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def own_errors(self) -> list[EntryComparison]:
        """Fixed-input mode: the calls with an error of their own, innermost first found (a FAIL replay none
        of whose submodules' replays in the same step and direction FAIL)."""
        failed = [e for e in self.fixed_input if e.verdict is Verdict.FAIL]
        own = [e for e in failed if not any(f is not e and f.direction == e.direction and _is_ancestor(e, f)
                                            for f in failed)]
        return sorted(own, key=lambda e: (e.direction != "fixed_forward", e.step))

    def _fixed_input_lines(self) -> list[str]:
        if not self.fixed_input and not self.fixed_input_failures:
            return []
        own = self.own_errors
        head = f"fixed input ({len(self.fixed_input)} replays of test calls on the reference inputs): "
        failed = self.fixed_input_failures
        tail = [] if not failed else [
            f"fixed input: {len(failed)} calls could not be replayed (first: module {failed[0].get('module')!r} step "
            f"{failed[0].get('step')} call {failed[0].get('call')}: {failed[0].get('error')})"]
        if not own:
            return [head + "every module is clean on its own", *tail]
        names = "; ".join(f"{e.module or '<root>'!r} ({e.cls}) step {e.step} call {e.call} "
                          f"{e.direction.removeprefix('fixed_')} {_first_failed(e)}"
                          + (" (its forward replay is wrong too: may come from it)" if _after_forward(e, own) else "")
                          for e in own)
        return [head + f"errors of their own in {names}; every other module is clean on its own", *tail]

    @property
    def first_divergence(self) -> dict[str, dict[str, Any] | None]:
        return {"forward": _first_fail(_forward_events(self.forward)),
                "backward": _first_fail(_backward_events(self.backward))}

    @property
    def diverged(self) -> bool:
        first = self.first_divergence
        return first["forward"] is not None or first["backward"] is not None

    def summary(self) -> str:
        """"no divergence in N steps" or one line per direction that diverged."""
        mode = " (statistics only)" if self.stats_only else ""
        if not self.diverged:
            return "\n".join([f"no divergence in {len(self.steps)} steps{mode}", *self._fixed_input_lines()])
        lines = []
        first = self.first_divergence
        for direction, d in first.items():
            if d is None:
                lines.append(f"first divergence ({direction}): none")
                continue
            seen = d.get("seen_in")
            where = (f"tensor {d['tensor']} of its submodule {seen['module']!r} call {seen['call']} (the code between "
                     f"its submodules)") if seen else f"tensor {d['tensor']}"
            lines.append(f"first divergence ({direction}): step {d['step']}, module {d['module'] or '<root>'!r} "
                         f"({d['class']}) call {d['call']}, {where}: {d['message']}{mode}")
            if direction == "backward" and first["forward"] is not None and first["forward"]["step"] <= d["step"]:
                lines[-1] += " (after the forward divergence: may be inherited from it)"
        return "\n".join([*lines, *self._fixed_input_lines()])

    def to_json(self) -> dict[str, Any]:
        return {"format": "ditorch.compare_runs/1", "reference": self.ref_path, "test": self.test_path,
                "fp64": self.fp64_path, "stats_only": self.stats_only, "steps": self.steps,
                "first_divergence": self.first_divergence, "alignment": self.alignment.to_json(),
                "unmatched_entries": self.unmatched_entries,
                "forward": [e.to_json() for e in self.forward], "backward": [e.to_json() for e in self.backward],
                "fixed_input": None if not (self.fixed_input or self.fixed_input_failures) else {
                    "reference": self.fixed_input_reference, "failed": self.fixed_input_failures,
                    "own_errors": [_own_error_json(e, self.own_errors) for e in self.own_errors],
                    "entries": [e.to_json() for e in self.fixed_input]}}

    def write_json(self, path: str | Path) -> None:
        with atomic_open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1, allow_nan=False)

    def write_html(self, path: str | Path) -> None:
        write_comparison_page(path, self, _STATS)


def _first_failed(entry: EntryComparison) -> str:
    return next((name for name, r in entry.tensors.items() if r.verdict is Verdict.FAIL), "")


def _after_forward(entry: EntryComparison, own: list[EntryComparison]) -> bool:
    """Whether a backward own error lies in, around or at a module whose forward replay has an error of its own
    in the same step (a wrong forward makes the backward wrong too)."""
    return entry.direction == "fixed_backward" and any(
        f.direction == "fixed_forward" and f.step == entry.step
        and (f.module == entry.module or _is_ancestor(f, entry) or _is_ancestor(entry, f)) for f in own)


def _own_error_json(entry: EntryComparison, own: list[EntryComparison]) -> dict[str, Any]:
    name = _first_failed(entry)
    return {"module": entry.module, "ref_module": entry.ref_module, "class": entry.cls, "step": entry.step,
            "call": entry.call, "direction": entry.direction.removeprefix("fixed_"), "tensor": name,
            "alignment": entry.alignment, "after_forward_error": _after_forward(entry, own)} | \
        _result_json(entry.tensors[name])


def _key(entry: dict[str, Any]) -> tuple[str, int, int]:
    return entry["module"], int(entry["step"]), int(entry["call"])


def run_precision(dump: Dump) -> torch.dtype | None:
    """The floating dtype that holds most parameter elements of ``dump`` (the run's working precision)."""
    counts: dict[str, int] = {}
    seen: set[str] = set()
    for entry in dump.forward:
        if entry["module"] in seen:
            continue
        seen.add(entry["module"])
        for name, stats in entry["tensors"].items():
            if name.startswith("param.") and _dtype(stats.get("dtype")).is_floating_point:
                counts[stats["dtype"]] = counts.get(stats["dtype"], 0) + int(stats.get("numel") or 0)
    return _dtype(max(counts, key=counts.__getitem__)) if counts else None


def _precision(ref: Dump, test: Dump) -> torch.dtype | None:
    """The coarser of the two runs' working precisions when they differ, else None."""
    a, b = run_precision(ref), run_precision(test)
    return _coarser(a, b) if a is not None and b is not None and a != b else None


def _compare_entries(ref: Dump, test: Dump, fp64: Dump | None, direction: str, alignment: Alignment,
                     stats_only: bool, unmatched: list[dict[str, Any]],
                     precision: torch.dtype | None = None) -> list[EntryComparison]:
    ref_index = {_key(e): e for e in getattr(ref, direction)}
    fp64_index = {_key(e): e for e in getattr(fp64, direction)} if fp64 is not None else {}
    wrappers = set(alignment.wrappers_test)
    out: list[EntryComparison] = []
    used: set[tuple[str, int, int]] = set()
    for entry in getattr(test, direction):
        module, step, call = _key(entry)
        if module in wrappers:
            continue
        pair = alignment.pairs.get(module)
        ref_entry = ref_index.get((pair[0], step, call)) if pair else None
        if pair is None or ref_entry is None:
            unmatched.append({"side": "test", "module": module, "step": step, "call": call, "direction": direction})
            continue
        used.add(_key(ref_entry))
        fp64_entry = fp64_index.get((pair[0], step, call))
        out.append(_compare_entry(ref, test, fp64, entry, ref_entry, fp64_entry, pair, stats_only,
                                  precision=precision))
    for key in ref_index:
        if key not in used and key[0] not in alignment.wrappers_ref:
            unmatched.append({"side": "reference", "module": key[0], "step": key[1], "call": key[2],
                              "direction": direction})
    return out


def _compare_fixed(ref: Dump, test: Dump, fp64: Dump | None, alignment: Alignment, stats_only: bool,
                   precision: torch.dtype | None = None) -> list[EntryComparison]:
    """Judge each fixed-input replay entry of ``test`` against the reference call it replayed (the tensors
    both have: outputs; input gradients; parameter gradients where the replay could give them)."""
    out: list[EntryComparison] = []
    for entry in test.fixed_input:
        direction = entry["direction"]
        module, step, call = _key(entry)
        pair = alignment.pairs.get(module)
        if pair is None:
            continue
        ref_entry = {_key(e): e for e in getattr(ref, direction)}.get((pair[0], step, call))
        if ref_entry is None:
            continue
        fp64_entry = ({_key(e): e for e in getattr(fp64, direction)}.get((pair[0], step, call))
                      if fp64 is not None else None)
        result = _compare_entry(ref, test, fp64, entry, ref_entry, fp64_entry, pair, stats_only, shared_only=True,
                                precision=precision)
        if result.tensors:
            result.direction = f"fixed_{direction}"
            out.append(result)
    return out


def _compare_entry(ref: Dump, test: Dump, fp64: Dump | None, entry: dict[str, Any], ref_entry: dict[str, Any],
                   fp64_entry: dict[str, Any] | None, pair: tuple[str, str], stats_only: bool,
                   shared_only: bool = False, precision: torch.dtype | None = None) -> EntryComparison:
    t_stats, r_stats = entry["tensors"], ref_entry["tensors"]
    if shared_only:
        t_stats = {k: v for k, v in t_stats.items() if k in r_stats}
        r_stats = {k: v for k, v in r_stats.items() if k in t_stats}
    f_stats = fp64_entry["tensors"] if fp64_entry else {}
    results: dict[str, TensorComparison] = {}
    if not stats_only:
        t_data, r_data = test.tensors(entry), ref.tensors(ref_entry)
        f_data = fp64.tensors(fp64_entry) if fp64 is not None and fp64_entry and fp64_entry.get("dir") else {}
    for name in dict.fromkeys([*t_stats, *r_stats]):
        if name not in r_stats:
            results[name] = _fail(name, "only in the test dump")
        elif name not in t_stats:
            results[name] = _fail(name, "only in the reference dump")
        elif stats_only or name not in t_data or name not in r_data:
            results[name] = compare_stats(name, t_stats[name], r_stats[name], f_stats.get(name), precision)
        else:
            results[name] = compare_full(name, t_data[name], r_data[name], f_data.get(name), precision)
    return EntryComparison(module=entry["module"], ref_module=pair[0], cls=str(entry.get("class", "")),
                           step=int(entry["step"]), call=int(entry["call"]), direction=entry["direction"],
                           alignment=pair[1], tensors=results, test_stats=t_stats, ref_stats=r_stats)


def compare_runs(ref: str | Path | Dump, test: str | Path | Dump,
                 fp64: str | Path | Dump | None = None) -> RunComparison:
    """Compare the ``test`` dump with the ``ref`` dump (paths or loaded :class:`Dump` objects), using the
    ``fp64`` dump (a float64 run of the same model) as the noise floor when given. A statistics-only dump on
    either side makes a statistics comparison. :class:`ValueError` when nothing aligns, :class:`DumpError` for
    a missing or damaged dump file."""
    ref_d, test_d = _as_dump(ref), _as_dump(test)
    fp64_d = _as_dump(fp64) if fp64 is not None else None
    alignment = align_modules(ref_d, test_d)
    stats_only = ref_d.stats_only or test_d.stats_only
    unmatched: list[dict[str, Any]] = []
    precision = _precision(ref_d, test_d)
    forward = _compare_entries(ref_d, test_d, fp64_d, "forward", alignment, stats_only, unmatched, precision)
    backward = _compare_entries(ref_d, test_d, fp64_d, "backward", alignment, stats_only, unmatched, precision)
    steps = sorted(set(ref_d.steps) & set(test_d.steps)) or sorted({e.step for e in forward + backward})
    return RunComparison(ref_path=str(ref_d.path), test_path=str(test_d.path),
                         fp64_path=str(fp64_d.path) if fp64_d is not None else None, stats_only=stats_only,
                         steps=steps, alignment=alignment, forward=forward, backward=backward,
                         unmatched_entries=unmatched, modules=dict(test_d.modules),
                         fixed_input=_compare_fixed(ref_d, test_d, fp64_d, alignment, stats_only, precision),
                         fixed_input_reference=test_d.fixed_input_reference,
                         fixed_input_failures=test_d.fixed_input_failures)
