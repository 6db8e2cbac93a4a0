"""``run``: judge a target on stored cases.

A target is a vendor implementation called directly (``--impl NAME``: :func:`diopi.impls.load`, kernels called
on host tensors) or a torch device (``--device DEV``: the ATen overload called through ``torch.ops`` on tensors
rebuilt on the device with their recorded layout). Every output, and every argument the call writes, is judged
by :func:`diopi.compare.compare_outputs` against the stored CPU result (with the float64 reference where stored);
an input the call should not write must come back unchanged. Random functions are judged by
:func:`diopi.conformance.stats.check_random` and by seed reproducibility, never by value.

Outcomes: ``PASS``; ``FAIL`` (a wrong result, an input changed, or the target raised on a valid case);
``SKIP`` (the device config names the case; its reason is kept); ``NOT_IMPLEMENTED`` (the implementation has no
kernel for the function, or the target raised ``NotImplementedError`` or
:class:`diopi.impls.UnsupportedDtypeError`: a gap, not a wrong answer, so it is reported apart and does not make
the run fail); ``ERROR`` (the case itself cannot be used: missing or corrupted data).
"""

from __future__ import annotations

import atexit
import importlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

import diopi
from diopi import case_format as cf
from diopi.compare import TensorComparison, Verdict, compare_outputs, compare_tensors
from diopi.conformance.cases import resolve_op
from diopi.conformance.device_config import DeviceConfig
from diopi.conformance.stats import check_random
from diopi.impls import ImplementationError, UnsupportedDtypeError, load
from diopi.tensor_walk import map_leaves

OUTCOMES = ("PASS", "FAIL", "SKIP", "NOT_IMPLEMENTED", "ERROR")

#: Device types whose PyTorch plug-in must be imported before the device exists.
DEVICE_PLUGINS = {"dipu": "torch_dipu", "npu": "torch_npu", "mlu": "torch_mlu", "musa": "torch_musa"}


class TargetError(ValueError):
    """An unknown or unusable ``--impl`` / ``--device``."""


@dataclass
class CaseResult:
    """The outcome of one case."""

    case: str
    function: str
    outcome: str
    detail: str = ""
    op: str = ""
    family: str = ""
    dtype: str = ""
    layout: str = ""
    max_abs_error: float = math.nan
    max_rel_error: float = math.nan
    #: ``"yes"``/``"no"``: whether the call ran the device's kernel for this function (a device whose plug-in
    #: counts its kernels, as torch_dipu does); empty where unknown.
    reached: str = ""


#: Exceptions that say "not implemented" rather than "wrong".
NOT_IMPLEMENTED_ERRORS = (NotImplementedError, UnsupportedDtypeError)


class ImplTarget:
    """A DIOPI implementation (any object with ``name`` and ``kernel(fn, op)``) called directly on host tensors."""

    device = "cpu"

    def __init__(self, impl: Any) -> None:
        self.impl = impl
        self.name = f"impl:{impl.name}"

    @classmethod
    def load(cls, name: str, **options: Any) -> ImplTarget:
        """The installed implementation ``name`` (:func:`diopi.impls.load`)."""
        try:
            return cls(load(name, **options))
        except ImplementationError as exc:
            raise TargetError(str(exc)) from None
        except (TypeError, ValueError) as exc:  # the vendor refused an option
            raise TargetError(f"--impl {name}: {exc}") from None

    def kernel(self, fn: diopi.DiopiFunction, op: torch._ops.OpOverload) -> Any:
        kernel = self.impl.kernel(fn, op)
        if kernel is None:
            return None
        return lambda *args, **kwargs: kernel(op, *args, **kwargs)


class DeviceTarget:
    """A torch device: the overload called through ``torch.ops`` on device tensors."""

    def __init__(self, device: str) -> None:
        kind = device.split(":", 1)[0]
        plugin = DEVICE_PLUGINS.get(kind)
        module = None
        if plugin is not None:
            try:
                module = importlib.import_module(plugin)
            except ImportError as exc:
                raise TargetError(f"--device {device}: its PyTorch plug-in {plugin} cannot be imported ({exc})") \
                    from None
        try:
            torch.empty(1, device=device)
        except (RuntimeError, ValueError, AssertionError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TargetError(f"--device {device}: unknown or unavailable device ({first})") from None
        self.device = device
        self.name = f"device:{device}"
        self.plugin = module
        #: Kernel calls per DIOPI function, where the plug-in counts them (``count_function_calls``): open for
        #: the target's life, so each case can tell whether it reached its function's kernel on the device.
        self.calls = None
        self._counting = None
        counter = getattr(module, "count_function_calls", None)
        if counter is not None:
            self._counting = counter()
            self.calls = self._counting.__enter__()
            atexit.register(self.close)  # a worker process ends without cli's close(): close before shutdown

    def close(self) -> None:
        """Stop counting kernel calls (the plug-in's counters cost a little per call while open)."""
        if self._counting is not None:
            self._counting.__exit__(None, None, None)
            self._counting = None

    def kernel(self, fn: diopi.DiopiFunction, op: torch._ops.OpOverload) -> Any:
        """The overload itself; a factory (an overload with a ``device`` keyword) makes its tensor on this
        device, as the case's CPU reference made it on the host."""
        if not any(a.name == "device" and a.kwarg_only for a in op._schema.arguments):
            return op
        device = self.device

        def on_device(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("device") is None or torch.device(kwargs["device"]).type == "cpu":
                kwargs = {**kwargs, "device": device}
            return op(*args, **kwargs)

        return on_device


def device_reachability(device: str) -> dict[str, str | None] | None:
    """For every DIOPI function: None when a call on ``device`` reaches the device's kernel for it, else why not;
    None as a whole when the device's plug-in cannot tell (it has no ``reachability()``, as torch_dipu has)."""
    target = DeviceTarget(device)
    target.close()
    report = getattr(target.plugin, "reachability", None)
    if report is None:
        return None
    return {name: None if any(p.reachable for p in packets) else "; ".join(p.reason for p in packets if p.reason)
            for name, packets in report().items()}


def make_target(impl: str | None = None, device: str | None = None, options: dict[str, Any] | None = None) -> Any:
    """The target named by ``--impl`` or ``--device`` (exactly one)."""
    if (impl is None) == (device is None):
        raise TargetError("give exactly one of --impl NAME and --device DEV")
    return ImplTarget.load(impl, **(options or {})) if impl is not None else DeviceTarget(str(device))


def _rebuild(case: cf.LoadedCase, keys: list[str], device: str) -> dict[str, torch.Tensor]:
    tensors = case.record["tensors"]
    return {k: cf.rebuild_tensor(tensors[k], case.data[k], device) for k in keys}


def _keys(prefix: str, case: cf.LoadedCase) -> list[str]:
    return [k for k in case.record["tensors"] if k.startswith(prefix) and k[len(prefix):].isdigit()]


def _at(args: list[Any], kwargs: dict[str, Any], location: list[Any]) -> Any:
    where, index = location
    return args[int(index)] if where == "args" else kwargs[str(index)]


def _worst(results: list[TensorComparison]) -> tuple[float, float]:
    abs_ = [r.max_abs_error for r in results if not math.isnan(r.max_abs_error)]
    rel = [r.max_rel_error for r in results if not math.isnan(r.max_rel_error)]
    return (max(abs_) if abs_ else math.nan), (max(rel) if rel else math.nan)


def _to_host(value: Any) -> Any:
    return map_leaves(value, lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x)


def run_case(path: Path, target: Any, device_config: DeviceConfig | None = None) -> CaseResult:
    """Judge ``target`` on the case stored in ``path``; never raises for a bad case (ERROR) or a bad result."""
    fallback_id = f"{path.parent.name}/{path.name}"
    try:
        case = cf.load_case(path)
        conf = case.record.get("conformance")
        if not isinstance(conf, dict) or "function" not in conf:
            raise cf.CaseFormatError(f"{path / cf.CASE_FILE}: no 'conformance' section (not made by gen)")
        op = resolve_op(case.op)
        fn = diopi.get_function(str(conf["function"]))
    except (cf.CaseFormatError, ValueError, KeyError, diopi.UnknownFunctionError) as exc:
        return CaseResult(fallback_id, path.parent.name, "ERROR", f"corrupted case: {exc}")
    result = CaseResult(str(conf.get("id", fallback_id)), fn.name, "PASS", op=str(op), family=fn.family,
                        dtype=str(conf.get("dtype", "")), layout=str(conf.get("layout", "")))
    reason = device_config.skip_reason(conf) if device_config else None
    if reason is not None:
        result.outcome, result.detail = "SKIP", reason
        return result
    kernel = target.kernel(fn, op)
    if kernel is None:
        result.outcome, result.detail = "NOT_IMPLEMENTED", f"{target.name} has no kernel for {fn.name} ({op})"
        return result
    try:
        inputs = _rebuild(case, _keys("i", case), target.device)
        originals = _rebuild(case, list(inputs), "cpu")
        args = cf.decode_value(case.record["args"], inputs)
        kwargs = cf.decode_value({"dict": case.record["kwargs"]}, inputs) if case.record["kwargs"] else {}
    except (cf.CaseFormatError, cf.NotReplayableError, KeyError, TypeError, ValueError) as exc:
        result.outcome, result.detail = "ERROR", f"corrupted case: {exc}"
        return result
    except RuntimeError as exc:  # an argument names a device this process lacks (torch.device("dipu") unregistered)
        result.outcome, result.detail = "ERROR", f"case not usable in this process: {_first_line(exc)}"
        return result
    seed = int(conf.get("seed", 0))
    try:
        torch.manual_seed(seed)
        calls = getattr(target, "calls", None)
        before = calls[fn.name] if calls is not None else 0
        output = _to_host(kernel(*args, **kwargs))
        if calls is not None:
            result.reached = "yes" if calls[fn.name] > before else "no"
    except NOT_IMPLEMENTED_ERRORS as exc:
        result.outcome, result.detail = "NOT_IMPLEMENTED", f"{type(exc).__name__}: {_first_line(exc)}"
        return result
    except Exception as exc:  # the reference ran this case: a target raising on it is wrong
        result.outcome, result.detail = "FAIL", f"raised {type(exc).__name__}: {_first_line(exc)}"
        return result
    written = {id(_at(args, kwargs, loc)) for loc, _ in conf.get("written", [])}
    if case.record.get("random"):
        problem = _check_random(case, conf, kernel, inputs, originals, output, seed, target.device)
        if problem:
            result.outcome, result.detail = "FAIL", problem
        return result
    try:
        expected = cf.decode_value(case.record["outputs"], _rebuild(case, _keys("o", case), "cpu"))
        reference = case.record.get("reference_outputs")
        reference = None if reference is None else cf.decode_value(reference, _rebuild(case, _keys("r", case), "cpu"))
        expected_written = _rebuild(case, _keys("w", case), "cpu")
    except (cf.CaseFormatError, cf.NotReplayableError, KeyError, TypeError, ValueError) as exc:
        result.outcome, result.detail = "ERROR", f"corrupted case: {exc}"
        return result
    atol, rtol = _tolerance(conf, device_config)
    comparisons = compare_outputs(output, expected, expected_fp64=reference, op=str(op), atol=atol, rtol=rtol)
    for loc, enc in conf.get("written", []):
        actual = _to_host(_at(args, kwargs, loc))
        want = cf.decode_value(enc, expected_written)
        for c in compare_outputs(actual, want, op=str(op), atol=atol, rtol=rtol):
            comparisons.append(_renamed(c, f"written {loc[0]}[{loc[1]!r}]"))
    for key, t in inputs.items():  # inputs the call may not write must be unchanged
        if id(t) in written or _written_through_list(t, args, kwargs, conf):
            continue
        c = compare_tensors(t.detach().cpu(), originals[key], atol=0.0, rtol=0.0, path=f"input {key}")
        if c.verdict is Verdict.FAIL:
            comparisons.append(_renamed(c, f"input {key} changed by the call (not an in-place argument)"))
    result.max_abs_error, result.max_rel_error = _worst(comparisons)
    failed = [c for c in comparisons if c.verdict is Verdict.FAIL]
    if failed:
        result.outcome, result.detail = "FAIL", "; ".join(c.message for c in failed[:3])
    elif any(c.verdict is Verdict.PASS_NOISE for c in comparisons):
        result.detail = "PASS (noise): " + next(c.message for c in comparisons if c.verdict is Verdict.PASS_NOISE)
    return result


def _written_through_list(t: torch.Tensor, args: list[Any], kwargs: dict[str, Any], conf: dict[str, Any]) -> bool:
    """Whether ``t`` is an element of a written list argument (``_foreach_add_``'s self)."""
    for loc, _ in conf.get("written", []):
        value = _at(args, kwargs, loc)
        if isinstance(value, (list, tuple)) and any(v is t for v in value):
            return True
    return False


def _renamed(c: TensorComparison, label: str) -> TensorComparison:
    return replace(c, message=f"{label}: {c.message}")


def _tolerance(conf: dict[str, Any], device_config: DeviceConfig | None) -> tuple[float | None, float | None]:
    """Device config first, then the case's config, else None (the comparison's defaults)."""
    found = device_config.tolerance(conf) if device_config else None
    if found is not None:
        return found
    own = conf.get("tolerance", {}).get(conf.get("dtype"))
    return (float(own[0]), float(own[1])) if own else (None, None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _check_random(case: cf.LoadedCase, conf: dict[str, Any], kernel: Any, inputs: dict[str, torch.Tensor],
                  originals: dict[str, torch.Tensor], output: Any, seed: int, device: str) -> str | None:
    """Statistics of the first result, then the same seed again must give the same result."""
    params = cf.decode_value({"dict": conf.get("params", {})}, {}) if conf.get("params") else {}
    host_args = cf.decode_value(case.record["args"], originals)
    try:
        stats = conf.get("stats")
        stats = cf.decode_value({"dict": stats}, {}) if stats else None
        problem = check_random(stats, params, host_args, output)
    except ValueError as exc:
        return f"stats config: {exc}"
    if problem:
        return problem
    again_inputs = _rebuild(case, list(inputs), device)
    args = cf.decode_value(case.record["args"], again_inputs)
    kwargs = cf.decode_value({"dict": case.record["kwargs"]}, again_inputs) if case.record["kwargs"] else {}
    torch.manual_seed(seed)
    again = _to_host(kernel(*args, **kwargs))
    same = compare_outputs(again, output, atol=0.0, rtol=0.0)
    if any(c.verdict is Verdict.FAIL for c in same):
        return "not reproducible: the same seed gave a different result"
    return None
