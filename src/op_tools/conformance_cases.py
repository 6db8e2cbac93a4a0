"""Turn OpCapture output into DIOPI conformance cases: ``ditorch conformance from-capture CAPTURE_DIR OUT_DIR``.

Each captured call (an API-level call such as ``torch.nn.functional.linear`` with its inputs) is replayed on the
CPU under :class:`diopi.conformance.recording.CallRecorder`, forward and, where the capture has gradients or an
input requires grad, backward. Every call of a DIOPI function made on the way becomes a conformance case of that
function, with the real model's shapes, strides, dtypes and parameters, and its CPU reference computed by
``diopi.conformance.gen.write_case``. Calls are deduplicated by signature (function, operator, every tensor's
shape/stride/dtype, every other argument's value) and capped per function. ``OUT_DIR`` then runs as any data
folder: ``python -m diopi.conformance run --impl droplet --data OUT_DIR``.

This lives in op_tools, not diopi: it reads op_tools' captures and resolves their operator names with op_tools'
resolver, and diopi imports nothing above itself.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

import diopi
from diopi import case_format as cf
from diopi.conformance.cases import CaseSpec
from diopi.conformance.gen import FROM_CAPTURE_INDEX, ReferenceFailed, write_case
from diopi.conformance.recording import CallRecorder, RecordedCall, composites_recorded
from diopi.conformance.spec import Config
from diopi.env import ConfigError
from op_tools.config import int_at_least
from op_tools.naming import resolve_function
from op_tools.replay import _output_tensors, _Rebuilt, find_cases, not_replayable
from op_tools.run_op_from_data import NO_CASE_HINT


@dataclass
class FromCaptureResult:
    """What one conversion did: cases written per function, captured calls read, calls skipped with a reason."""

    written: Counter = field(default_factory=Counter)
    calls_read: int = 0
    duplicates: int = 0
    capped: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _signature(call: RecordedCall, function: str) -> str:
    leaves, _ = tree_flatten((call.args, call.kwargs))
    parts = [function, str(call.op)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append(f"T{tuple(leaf.shape)}{leaf.stride()}{leaf.storage_offset()}{leaf.dtype}")
        else:
            parts.append(repr(leaf))
    return "|".join(parts)


def _dtype(call: RecordedCall) -> torch.dtype:
    tensors = [x for x in tree_flatten((call.args, call.kwargs))[0] if isinstance(x, torch.Tensor)]
    floating = [t for t in tensors if t.is_floating_point()]
    return (floating or tensors)[0].dtype if tensors else torch.get_default_dtype()


def _to_cpu(case: cf.LoadedCase) -> dict[str, str]:
    """The device map sending every device type the case names (its own, its tensors', its arguments') to cpu."""
    types = {case.device_type, *(cf.device_type(str(meta.get("device", "cpu")))
                                 for meta in case.record.get("tensors", {}).values())}
    types.update(_argument_device_types(case.record.get("args")), _argument_device_types(case.record.get("kwargs")))
    return {t: "cpu" for t in types if t and t != "cpu"}


def _argument_device_types(struct: Any) -> set[str]:
    """The device types named by ``{"device": ...}`` values anywhere in an encoded args/kwargs structure."""
    found: set[str] = set()
    if isinstance(struct, dict):
        if isinstance(struct.get("device"), str) and len(struct) == 1:
            found.add(cf.device_type(struct["device"]))
        for value in struct.values():
            found |= _argument_device_types(value)
    elif isinstance(struct, list):
        for value in struct:
            found |= _argument_device_types(value)
    return found


def _replay_recording(case: cf.LoadedCase, allow_modules: tuple[str, ...]) -> list[RecordedCall]:
    """Every DIOPI call the captured call makes on the CPU, forward then backward."""
    func = resolve_function(case.op, allow_modules)
    has_backward = isinstance(case.record.get("backward"), dict)
    # Every device the capture names becomes the CPU, the inputs' and the call's own arguments alike (a factory's
    # device=dipu, x.new_ones(...) on the device): the cases hold CPU calls, which any process can run, with or
    # without the capture's device plug-in (``python -m diopi.conformance run --impl ...`` imports none).
    rebuilt = _Rebuilt(case, "cpu", _to_cpu(case), with_grad=True)
    with CallRecorder(None) as recorder:
        out = func(*rebuilt.args, **rebuilt.kwargs)
    calls = list(recorder.calls)
    outs = [t for t in _output_tensors(out).values() if t.requires_grad and t.is_floating_point()]
    if outs and (has_backward or rebuilt.leaves):
        generator = torch.Generator().manual_seed(0)
        grads = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype) for t in outs]
        with CallRecorder(None) as recorder:
            torch.autograd.backward(outs, grads)
        calls.extend(recorder.calls)
    return calls


def cases_from_capture(capture_dir: str | Path, out_dir: str | Path, *, per_function: int = 20,
                       allow_modules: tuple[str, ...] = ()) -> FromCaptureResult:
    """Convert the captured calls under ``capture_dir`` into conformance cases in ``out_dir`` (see module doc).
    A captured case that cannot be read or replayed is skipped with its reason; the others go on."""
    out = Path(out_dir)
    result = FromCaptureResult()
    seen: set[str] = set()
    numbers: Counter = Counter()
    for path in find_cases(capture_dir):
        try:
            case = cf.load_case(path)
            reason = not_replayable(case.record)
            if reason is not None:
                result.skipped.append((str(path), reason))
                continue
            with composites_recorded():
                calls = _replay_recording(case, allow_modules)
        except Exception as exc:  # one bad capture must not stop the others
            result.skipped.append((str(path), f"{type(exc).__name__}: {exc}"))
            continue
        result.calls_read += 1
        for call in calls:
            fn = diopi.function_for_aten(call.op)
            if fn is None or fn.is_random:  # a random function is judged by its config's statistics: suite cases
                continue
            signature = _signature(call, fn.name)
            if signature in seen:
                result.duplicates += 1
                continue
            seen.add(signature)
            if numbers[fn.name] >= per_function:
                result.capped += 1
                continue
            case_id = f"{fn.name}/{numbers[fn.name]:04d}"
            spec = CaseSpec(id=case_id, function=fn.name, config=Config(fn.name, op=str(call.op)), shapes=(),
                            dtype=_dtype(call), params=(), layout="captured", mode="capture")
            try:
                write_case(out / case_id, case_id, spec, call.op, call.args, call.kwargs)
            except ReferenceFailed as exc:
                result.skipped.append((f"{path} ({fn.name})", str(exc)))
                continue
            numbers[fn.name] += 1
            result.written[fn.name] += 1
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {"source": str(Path(capture_dir).resolve()), "per_function": per_function,
                             "calls_read": result.calls_read, "cases": dict(sorted(result.written.items())),
                             "skipped": result.skipped}
    with cf.atomic_open(out / FROM_CAPTURE_INDEX, "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    return result


def add_arguments(parser: Any) -> None:
    """``from-capture`` options on ``parser``."""
    parser.add_argument("capture_dir", metavar="CAPTURE_DIR", help="an OpCapture run folder (or any folder above)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="where the cases go (then: run --data OUT_DIR)")
    parser.add_argument("--per-function", type=int_at_least(1), default=20, metavar="N",
                        help="at most N distinct cases per DIOPI function (default 20)")
    parser.add_argument("--allow-module", action="append", default=[], metavar="MODULE",
                        help="also replay captured functions of MODULE (captured with op_tools.apply_feature)")


def run(args: Any) -> int:
    """The ``from-capture`` command: convert, print a summary; status 2 when nothing could be converted (or the
    capture folder holds no captured case: one line, before any work)."""
    prog = "ditorch conformance from-capture"
    try:
        if not find_cases(args.capture_dir):
            raise ConfigError(f"{str(args.capture_dir)!r} holds no captured case; {NO_CASE_HINT}")
        result = cases_from_capture(args.capture_dir, args.out_dir, per_function=args.per_function,
                                    allow_modules=tuple(args.allow_module))
    except (FileNotFoundError, ConfigError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    for where, why in result.skipped:
        print(f"skipped {where}: {why}"[:400])
    total = sum(result.written.values())
    print(f"{result.calls_read} captured calls -> {total} cases of {len(result.written)} DIOPI functions in "
          f"{args.out_dir} ({result.duplicates} duplicates, {result.capped} over the cap of {args.per_function})")
    print(f"next: {next_command(args.out_dir)}")
    return 0 if total else 2


def next_command(out_dir: str | Path) -> str:
    """The command that judges the cases written to ``out_dir`` (printed after a conversion; runs as printed)."""
    return f"python -m diopi.conformance run --impl droplet --data {shlex.quote(str(out_dir))}"
