"""Replay captured cases: rebuild each call on a device, run it again, compare with what was captured.

Every case under a folder (searched recursively) is loaded (:func:`diopi.case_format.load_case`), its
inputs are rebuilt with their recorded layout on the target device (fresh copies for every run, so
in-place ops always start from the captured inputs), the op runs forward and, with the captured output
gradients, backward; the results are compared with the captured ones by :mod:`diopi.compare` and checked
for bitwise equality. With ``acc_check`` the same inputs also run on the CPU (and in float64) and the
device result is judged against that reference instead. A case that cannot be read or run is reported
with the file at fault; the others go on. Captures of upstream op_tools (``input.pth``/``output.pth``
folders) are found and replayed too: :mod:`op_tools.upstream_capture` turns each into a case in memory.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from diopi import case_format as cf
from diopi.compare import TensorComparison, Verdict, compare_outputs
from diopi.tensor_walk import map_leaves
from op_tools import upstream_capture
from op_tools.device_sync import synchronizer
from op_tools.module_case import ModuleCall, rebuild_module
from op_tools.naming import is_uninitialized_name, resolve_function

__all__ = ["CaseResult", "ReplayOptions", "find_cases", "not_replayable", "replay_case", "replay_dir", "run_stats"]


@dataclass
class ReplayOptions:
    """What :func:`replay_case` does (the command-line flags)."""

    device: str | None = None
    run_times: int = 1
    only_run_forward: bool = False
    sync_time_measure: bool = False
    acc_check: bool = False
    allow_modules: tuple[str, ...] = ()  # modules outside torch whose functions may be called


@dataclass
class CaseResult:
    """The outcome of replaying one case."""

    path: str
    op: str = "?"
    status: str = "ERROR"  # PASS, FAIL, ERROR, SKIP
    forward: str = "-"
    backward: str = "-"
    bitwise_forward: bool | None = None
    bitwise_backward: bool | None = None
    max_abs_error: float = 0.0
    message: str = ""
    device: str = ""
    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)

    def as_row(self) -> dict[str, Any]:
        return {
            "path": self.path, "op": self.op, "status": self.status, "forward": self.forward,
            "backward": self.backward, "bitwise_forward": self.bitwise_forward,
            "bitwise_backward": self.bitwise_backward,
            "max_abs_error": self.max_abs_error if math.isfinite(self.max_abs_error) else str(self.max_abs_error),
            "device": self.device, "forward_ms": _mean(self.forward_ms), "backward_ms": _mean(self.backward_ms),
            "message": self.message,
        }


def run_stats(times: list[float]) -> dict[str, Any] | None:
    """min, median and max of one case's per-run times (ms). The first run includes warm-up (first-call
    costs, caches), so with more than one run it is left out; with one run it is all there is."""
    if not times:
        return None
    used = times[1:] if len(times) > 1 else times
    return {"min": min(used), "median": statistics.median(used), "max": max(used), "runs": len(used),
            "warmup_excluded": len(times) > 1}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def find_cases(root: str | Path) -> list[Path]:
    """Case directories (holding ``case.json``) and upstream capture folders (holding ``input.pth`` or
    ``output.pth``) under ``root``, or ``root`` itself, in a stable order. A file names the case it belongs to
    when it is one of a case's files (``case.json``, ``input.pth``, ``output.pth``); any other file holds no case."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or directory")
    if root.is_file():  # a case's own file names its case; any other file holds none (never search its folder)
        if root.name not in (cf.CASE_FILE, "input.pth", "output.pth"):
            return []
        root = root.parent
    if (root / cf.CASE_FILE).is_file() or upstream_capture.is_capture_dir(root):
        return [root]

    def key(p: Path) -> tuple:
        return tuple(int(part) if part.isdigit() else math.inf for part in p.relative_to(root).parts[-1:]) + (
            str(p),)

    found = {p.parent for p in root.rglob(cf.CASE_FILE)}
    found.update(upstream_capture.find_captures(root))
    return sorted(found, key=key)


def _device_available(device: str) -> bool:
    try:
        d = torch.device(device)
    except RuntimeError:
        return False
    if d.type == "cpu":
        return True
    module = getattr(torch, d.type, None)
    try:
        count = module.device_count() if module is not None else 0
    except Exception:
        return False
    return count > (d.index or 0)


def _target_device(record: dict[str, Any], explicit: str | None) -> str:
    if explicit:
        return str(torch.device(explicit))
    captured = str(record.get("device", "cpu"))
    if _device_available(captured):
        return captured
    if torch.accelerator.is_available():
        return str(torch.accelerator.current_accelerator())
    return "cpu"


def _sync(device: str) -> None:
    synchronizer(torch.device(device).type)()


class _Rebuilt:
    """One rebuild of a case's inputs on a device."""

    def __init__(self, case: cf.LoadedCase, device: str, device_map: dict[str, str], with_grad: bool,
                 dtype: torch.dtype | None = None) -> None:
        record = case.record
        self.tensors: dict[str, torch.Tensor] = {}
        self.leaves: dict[str, torch.Tensor] = {}
        inplace = bool(record.get("inplace"))
        for key, meta in record["tensors"].items():
            if not key.startswith("i"):
                continue
            where = device if cf.device_type(str(meta["device"])) == case.device_type else str(meta["device"])
            t = cf.rebuild_tensor(meta, case.data[key], where)
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            if with_grad and meta.get("requires_grad") and (t.is_floating_point() or t.is_complex()):
                leaf = t.detach().requires_grad_(True)
                self.leaves[key] = leaf
                if inplace:
                    # A non-leaf with the same layout, so in-place ops are allowed and the gradient still
                    # reaches the leaf (the captured input before the op).
                    holder = cf.rebuild_tensor(meta, case.data[key], where)
                    t = holder.copy_(leaf)
                else:
                    t = leaf
            self.tensors[key] = t
        self.args = cf.decode_value(record["args"], self.tensors, device_map)
        self.kwargs = cf.decode_value({"dict": record["kwargs"]}, self.tensors, device_map)


def _host(value: Any) -> Any:
    return map_leaves(value, lambda v: v.detach().to("cpu") if isinstance(v, torch.Tensor) else v)


def _bitwise(actual: Any, expected: Any) -> bool:
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return False
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            return False
        a = actual.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        e = expected.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        return bool(torch.equal(a, e))
    if isinstance(expected, (list, tuple)):
        return isinstance(actual, (list, tuple)) and len(actual) == len(expected) and all(
            _bitwise(a, e) for a, e in zip(actual, expected, strict=True))
    if isinstance(expected, dict):
        return isinstance(actual, dict) and actual.keys() == expected.keys() and all(
            _bitwise(actual[k], expected[k]) for k in expected)
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected):
        return math.isnan(actual)
    return actual == expected


def _verdict(results: list[TensorComparison]) -> tuple[str, float]:
    if not results:
        return Verdict.PASS.value, 0.0
    worst = max(results, key=lambda r: (r.verdict == Verdict.FAIL, r.verdict == Verdict.PASS_NOISE))
    errors = [r.max_abs_error for r in results if not math.isnan(r.max_abs_error)]
    return worst.verdict.value, max(errors, default=0.0)


def _output_tensors(out: Any) -> dict[str, torch.Tensor]:
    enc = cf.Encoder("o", with_data=False)
    enc.encode(out)
    return enc.tensors


def _captured(case: cf.LoadedCase, struct: Any, prefix: str) -> Any:
    tensors = {k: cf.rebuild_tensor(m, case.data[k], "cpu") for k, m in case.record["tensors"].items()
               if k.startswith(prefix) and k in case.data}
    return cf.decode_value(struct, tensors)


def _timed(run: Callable[[], Any], device: str, sync: bool) -> tuple[Any, float]:
    """``run()`` and its milliseconds (with ``sync``, the device synchronized before and after)."""
    if sync:
        _sync(device)
    start = time.perf_counter()
    out = run()
    if sync:
        _sync(device)
    return out, (time.perf_counter() - start) * 1e3


def _backward(record: dict[str, Any], case: cf.LoadedCase, out: Any, rebuilt: _Rebuilt, device: str,
              sync: bool) -> tuple[dict[str, torch.Tensor | None], float]:
    section = record["backward"]
    outs = _output_tensors(out)
    roots, grads = [], []
    for okey, gkey in section["grad_outputs"].items():
        t = outs.get(okey)
        if t is None or not t.requires_grad:
            continue
        meta = section["tensors"][gkey]
        where = device if cf.device_type(str(meta["device"])) == case.device_type else "cpu"
        grads.append(cf.rebuild_tensor(meta, case.data[gkey], where).to(t.dtype))
        roots.append(t)
    wanted = [k for k in section["grad_inputs"] if k in rebuilt.leaves]
    if not roots or not wanted:
        return {}, 0.0
    result, ms = _timed(lambda: torch.autograd.grad(roots, [rebuilt.leaves[k] for k in wanted], grads,
                                                    allow_unused=True), device, sync)
    return dict(zip(wanted, result, strict=True)), ms


def not_replayable(record: dict[str, Any]) -> str | None:
    """Why a case cannot be replayed alone (``"replayable": false``: a collective, which needs the other ranks
    of its process group), or None."""
    if record.get("replayable", True) is not False:
        return None
    meta = record.get("collective") or {}
    op = record.get("op", "?")
    size, rank = meta.get("group_size"), meta.get("group_rank")
    group = f" of a group of {size} ranks (this case: rank {rank})" if size is not None else ""
    return f"{op} is a collective{group}: it needs the other ranks and is not replayed alone"


def replay_case(path: str | Path, options: ReplayOptions | None = None,
                on_time: Callable[[str, str, float], None] | None = None) -> CaseResult:
    """Replay one case directory; never raises for a bad case (the result says what went wrong)."""
    options = options or ReplayOptions()
    result = CaseResult(str(path))
    note = ""  # what the import of an upstream capture could not carry over
    try:
        if not (Path(path) / cf.CASE_FILE).is_file() and upstream_capture.is_capture_dir(path):
            result.op = upstream_capture.op_name_from_path(path) or result.op
            imported = upstream_capture.load_capture(path, options.allow_modules)
            case, note = imported.case, imported.note
        else:
            case = cf.load_case(path)
    except cf.CaseFormatError as exc:
        result.message = str(exc)
        return result
    record = case.record
    result.op = case.op
    if record.get("mode", "data") != "data":
        result.status, result.message = "SKIP", "statistics-only case (captured with OP_CAPTURE_MODE=stats)"
        return result
    reason = not_replayable(record)
    if reason is not None:
        result.status, result.message = "SKIP", reason
        return result
    try:
        func = (ModuleCall(rebuild_module(case, options.allow_modules)) if "module" in record
                else resolve_function(case.op, options.allow_modules))
        device = _target_device(record, options.device)
        result.device = device
        device_map = {case.device_type: torch.device(device).type}
        with_grad = not options.only_run_forward and bool(record.get("backward"))
        out = grads = None
        for _ in range(max(1, options.run_times)):
            rebuilt = _Rebuilt(case, device, device_map, with_grad)
            with torch.enable_grad() if with_grad else torch.no_grad():
                out, ms = _timed(partial(func, *rebuilt.args, **rebuilt.kwargs), device, options.sync_time_measure)
                result.forward_ms.append(ms)
                if on_time:
                    on_time(case.op, "forward", ms)
                if with_grad:
                    grads, bms = _backward(record, case, out, rebuilt, device, options.sync_time_measure)
                    if grads:
                        result.backward_ms.append(bms)
                        if on_time:
                            on_time(case.op, "backward", bms)
    except cf.NotReplayableError as exc:
        result.status, result.message = "SKIP", str(exc)
        return result
    except (cf.CaseFormatError, LookupError) as exc:
        result.message = f"{path}: {exc}"
        return result
    except Exception as exc:
        result.message = f"{case.op} raised {type(exc).__name__}: {exc}"
        return result
    try:
        _judge(result, case, func, out, grads, options)
    except cf.NotReplayableError as exc:  # an output that was not stored (an object of a library's own type)
        result.status, result.message = "SKIP", f"{case.op} ran; its captured outputs cannot be compared ({exc})"
    except (cf.CaseFormatError, KeyError, TypeError, ValueError) as exc:
        result.status = "ERROR"
        result.message = f"{Path(path) / cf.CASE_FILE}: the captured results are unreadable ({exc})"
    except Exception as exc:
        result.status = "ERROR"
        result.message = f"comparing the results of {case.op} failed ({type(exc).__name__}: {exc})"
    if note:
        result.message = f"{result.message}; {note}" if result.message else note
    return result


def _judge(result: CaseResult, case: cf.LoadedCase, func: Callable[..., Any], out: Any,
           grads: dict[str, Any] | None, options: ReplayOptions) -> None:
    record = case.record
    actual = _host(out)
    if options.acc_check:
        expected, expected_fp64 = _reference(case, func)
    else:
        expected, expected_fp64 = _captured(case, record["outputs"], "o"), None
    if record.get("random"):
        result.forward = "SKIP (random)"
    elif is_uninitialized_name(case.op):  # torch.empty & co.: the values are whatever memory held
        result.forward = "SKIP (uninitialized)"
    else:
        comparisons = compare_outputs(actual, expected, expected_fp64=expected_fp64, op=case.op)
        result.forward, result.max_abs_error = _verdict(comparisons)
        result.bitwise_forward = _bitwise(actual, expected)
        failed = [c for c in comparisons if c.verdict == Verdict.FAIL]
        if failed:
            result.message = failed[0].message
    if grads:
        section = record["backward"]
        captured = {k: cf.rebuild_tensor(section["tensors"][g], case.data[g], "cpu")
                    for k, g in section["grad_inputs"].items() if k in grads}
        actual_g = {k: _host(v) for k, v in grads.items()}
        comparisons = compare_outputs(actual_g, captured, op=case.op)
        result.backward, err = _verdict(comparisons)
        result.max_abs_error = max(result.max_abs_error, err)
        result.bitwise_backward = _bitwise(actual_g, captured)
        failed = [c for c in comparisons if c.verdict == Verdict.FAIL]
        if failed and not result.message:
            result.message = f"gradient {failed[0].message}"
    verdicts = [result.forward, result.backward]
    result.status = "FAIL" if Verdict.FAIL.value in verdicts else "PASS"


def _reference(case: cf.LoadedCase, func: Callable[..., Any]) -> tuple[Any, Any]:
    """The CPU result in the captured dtypes, and in float64 (for the noise rule)."""
    to_cpu = {case.device_type: "cpu"}
    cpu = _Rebuilt(case, "cpu", to_cpu, with_grad=False)
    with torch.no_grad():
        expected = _host(func(*cpu.args, **cpu.kwargs))
    try:
        wide = _Rebuilt(case, "cpu", to_cpu, with_grad=False, dtype=torch.float64)
        with torch.no_grad():
            fp64 = _host(func(*wide.args, **wide.kwargs))
    except Exception:
        fp64 = None
    return expected, fp64


def replay_dir(root: str | Path, options: ReplayOptions | None = None,
               on_time: Callable[[str, str, float], None] | None = None) -> Iterator[CaseResult]:
    """Replay every case under ``root``, one result per case."""
    for path in find_cases(root):
        yield replay_case(path, options, on_time)
