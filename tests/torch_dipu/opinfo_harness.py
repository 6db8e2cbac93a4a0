"""Run PyTorch's OpInfo database on dipu against CPU: the machinery behind ``test_opinfo.py``.

For every OpInfo entry that supports float32 on CPU, :func:`run_op` runs up to ``MAX_SAMPLES`` sample
inputs on CPU and on dipu and judges the results with :mod:`diopi.compare` (float64 reference when the
op supports float64). ``mode`` is ``"forward"`` (outputs, and inputs after the call to catch unexpected
mutation) or ``"backward"`` (gradients of every input that requires grad under a fixed random
cotangent). The outcome is pass, fail (reason) or skip (reason: the op cannot be run on CPU either).
"""

from __future__ import annotations

import functools
import json
import signal
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi.compare import Verdict, compare_outputs

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "opinfo_expected_failures.json"
SKIPS = HERE / "opinfo_skips.json"
MODES = ("forward", "backward")
MAX_SAMPLES = 8
OP_TIME_BUDGET = 2.0  # seconds of samples per op and mode; later samples are dropped once exceeded
OP_TIMEOUT = 60  # seconds; an op still running then is reported as a failure (hang)

# Ops whose values are random: only shapes and dtypes are compared.
RANDOM_OPS = frozenset(
    {
        "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
        "normal.in_place", "normal.number_mean", "uniform", "randn", "randn_like", "rand_like", "randint",
        "randint_like", "nn.functional.rrelu", "nn.functional.dropout", "nn.functional.dropout2d",
        "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    }
)
# Ops whose outputs are uninitialized memory: only shapes and dtypes are compared.
UNINITIALIZED_OPS = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                               "new_empty_strided"})
# Ops whose tensor arguments (not the input) stay on the CPU: the op requires it on every device.
CPU_ARGUMENT_OPS = frozenset({"tensor_split"})
# Ops left out entirely (name -> reason): too slow for the CI budget or unusable by this harness.
EXCLUDED_OPS: dict[str, str] = {}


@dataclass(frozen=True)
class Outcome:
    status: str  # "pass", "fail" or "skip"
    reason: str = ""


class _CpuError(Exception):
    """The reference run on CPU failed: the sample is unusable."""


class _Timeout(BaseException):
    pass


def full_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@functools.cache
def conformance_ops() -> dict[str, Any]:
    """Every OpInfo entry supporting float32 on CPU, by full name, in op_db order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {full_name(op): op for op in op_db if torch.float32 in op.supported_dtypes("cpu")}


def load_expectations() -> dict[str, dict[str, str]]:
    return json.loads(EXPECTATIONS.read_text()) if EXPECTATIONS.exists() else {}


# ----------------------------------------------------------------------------------------------- comparison


def _first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_first_line(str(exc))}"


def _compare_values(actual: list, expected: list, expected_fp64: list | None, op: str) -> str | None:
    """None when every tensor passes the comparison rules (diopi.compare), else the first failure message."""
    for r in compare_outputs(actual, expected, expected_fp64=expected_fp64, op=op):
        if r.verdict is Verdict.FAIL:
            return _first_line(r.message.removeprefix("FAIL "))
    return None


def _leaves(tree: Any) -> list:
    return tree_flatten(tree)[0]


def _judge(actual: Any, expected: Any, expected_fp64: Any, name: str, values: bool, what: str) -> str | None:
    """Compare two pytrees of results; None when they agree."""
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return f"{what}: {len(a_leaves)} results on dipu, {len(e_leaves)} on CPU"
    f_leaves = _leaves(expected_fp64) if expected_fp64 is not None else None
    if f_leaves is not None and len(f_leaves) != len(e_leaves):
        f_leaves = None
    a_t, e_t, f_t = [], [], []
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{what}[{i}]: dipu returned {type(a).__name__}, CPU a tensor"
            if a.device.type != "dipu" and e.device.type == "cpu":
                return f"{what}[{i}]: result on {a.device}, expected dipu"
            if a.shape != e.shape or a.dtype != e.dtype:
                return f"{what}[{i}]: dipu {a.dtype}{list(a.shape)} vs CPU {e.dtype}{list(e.shape)}"
            if values:
                a_t.append(a.detach().cpu())
                e_t.append(e.detach())
                f = f_leaves[i] if f_leaves is not None else None
                f_t.append(f.detach() if isinstance(f, torch.Tensor) and f.shape == e.shape else None)
        elif (
            values
            and (e is None or isinstance(e, bool | int | float | str | torch.dtype | torch.Size))
            and a != e
            and not (isinstance(e, float) and e != e and a != a)
        ):
            return f"{what}[{i}]: dipu {a!r} vs CPU {e!r}"
    if not a_t:
        return None
    use_fp64 = f_leaves is not None and all(f is not None for f in f_t)
    message = _compare_values(a_t, e_t, f_t if use_fp64 else None, name)
    return f"{what} {message}" if message else None  # e.g. "grad out[0]: 3/20 elements ..."


# ----------------------------------------------------------------------------------------------- running


def _to(device: str, dtype: torch.dtype | None = None) -> Callable[[Any], Any]:
    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            t = x.detach()
            if dtype is not None and t.dtype == torch.float32:
                t = t.to(torch.float64)
            t = t.to(device) if device != "cpu" else t.clone()
            return t.requires_grad_(x.requires_grad)
        if device != "cpu" and (x == "cpu" if isinstance(x, str) else isinstance(x, torch.device) and x.type == "cpu"):
            return torch.device(device)  # a device argument (factories, ``Tensor.to``)
        return x

    return move


def _device_kwargs(kwargs: dict, device: str) -> dict:
    if "device" in kwargs and kwargs["device"] in ("cpu", torch.device("cpu")):
        return {**kwargs, "device": device}
    return kwargs


def _prepare(sample: Any, device: str, fp64: bool, name: str) -> tuple[Any, tuple, dict]:
    move = _to(device, torch.float64 if fp64 else None)
    inp = tree_map(move, sample.input)
    # Some ops take index tensors that must live on the CPU whatever the device (as on CUDA).
    args, kwargs = tree_map(move if name not in CPU_ARGUMENT_OPS else _to("cpu", torch.float64 if fp64 else None),
                            (tuple(sample.args), dict(sample.kwargs)))
    return inp, args, _device_kwargs(kwargs, device)


def _grad_leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in _leaves(tree) if isinstance(t, torch.Tensor) and t.requires_grad]


def _call(op: Any, inp: Any, args: tuple, kwargs: dict, backward: bool) -> Any:
    if backward:
        # Run on non-leaf copies so in-place variants don't trip over leaves that require grad.
        inp, args, kwargs = tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) and t.requires_grad else t, (inp, args, kwargs)
        )
    return op(inp, *args, **kwargs)


def _forward(op: Any, sample: Any, device: str, fp64: bool = False) -> tuple[Any, Any]:
    inp, args, kwargs = _prepare(sample, device, fp64, op.name)
    out = _call(op, inp, args, kwargs, backward=False)
    return out, (inp, args, kwargs)


def _differentiable_outputs(out: Any, sample: Any) -> list[torch.Tensor]:
    out = sample.output_process_fn_grad(out)
    return [t for t in _leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.is_floating_point() or t.is_complex())]


def _backward(op: Any, sample: Any, device: str, cotangents: list[torch.Tensor] | None, fp64: bool = False) -> Any:
    """Gradients of the sample's grad-requiring inputs; returns (grads, cotangents used)."""
    inp, args, kwargs = _prepare(sample, device, fp64, op.name)
    leaves = _grad_leaves((inp, args, kwargs))
    outs = _differentiable_outputs(_call(op, inp, args, kwargs, backward=True), sample)
    if not leaves or not outs:
        return None, None
    if cotangents is None:
        gen = torch.Generator().manual_seed(0)
        cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    grad_outputs = [c.to(device=o.device, dtype=o.dtype) for c, o in zip(cotangents, outs, strict=True)]
    grads = torch.autograd.grad(outs, leaves, grad_outputs, allow_unused=True)
    return [g if g is not None else None for g in grads], cotangents


def _samples(op: Any, backward: bool) -> Iterator[Any]:
    return op.sample_inputs("cpu", torch.float32, requires_grad=backward)


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def run_op(name: str, mode: str) -> Outcome:
    """Run ``mode`` ("forward" or "backward") of OpInfo entry ``name`` on dipu against CPU."""
    op = conformance_ops()[name]
    if name in EXCLUDED_OPS:
        return Outcome("skip", EXCLUDED_OPS[name])
    backward = mode == "backward"
    if backward and not op.supports_autograd:
        return Outcome("skip", "op does not support autograd")
    alarm = hasattr(signal, "SIGALRM")
    if alarm:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(OP_TIMEOUT)
    try:
        return _run(op, name, backward)
    except _Timeout:
        return Outcome("fail", f"timeout: still running after {OP_TIMEOUT}s")
    finally:
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


def _run(op: Any, name: str, backward: bool) -> Outcome:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run_samples(op, name, backward)


def _run_samples(op: Any, name: str, backward: bool) -> Outcome:
    torch.manual_seed(zlib.crc32(name.encode()))
    try:
        samples = list(islice(_samples(op, backward), MAX_SAMPLES))
    except Exception as exc:  # noqa: BLE001
        return Outcome("skip", f"sample generation fails on CPU: {_error(exc)}")
    values = name not in RANDOM_OPS and name not in UNINITIALIZED_OPS
    fp64 = torch.float64 in op.supported_dtypes("cpu")
    ran = 0
    cpu_errors: list[str] = []
    start = time.perf_counter()
    for i, sample in enumerate(samples):
        if ran and time.perf_counter() - start > OP_TIME_BUDGET:
            break
        what = f"sample {i}"
        try:
            message = _run_backward(op, sample, name, values, fp64) if backward else _run_forward(
                op, sample, name, values, fp64
            )
        except _CpuError as exc:
            cpu_errors.append(str(exc))
            continue
        except _Timeout:
            raise
        except Exception as exc:  # noqa: BLE001
            return Outcome("fail", f"{what}: {_error(exc)}")
        if message == "no-grad":
            continue
        ran += 1
        if message:
            return Outcome("fail", f"{what}: {message}")
    if ran:
        return Outcome("pass")
    if cpu_errors:
        return Outcome("skip", f"every sample fails on CPU: {cpu_errors[0]}")
    if backward:
        return Outcome("skip", "no sample has a differentiable output")
    return Outcome("skip", "no samples")


def _cpu(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        raise _CpuError(_error(exc)) from exc


def _run_forward(op: Any, sample: Any, name: str, values: bool, fp64: bool) -> str | None:
    expected, cpu_inputs = _cpu(lambda: _forward(op, sample, "cpu"))
    expected_fp64 = None
    if fp64 and values:
        try:
            expected_fp64 = _forward(op, sample, "cpu", fp64=True)[0]
        except Exception:  # noqa: BLE001
            expected_fp64 = None
    actual, dipu_inputs = _forward(op, sample, "dipu")
    message = _judge(actual, expected, expected_fp64, name, values, "output")
    if message is None:
        # Inputs after the call: in-place ops must write, others must not mutate.
        tensors = [(a, e) for a, e in zip(_leaves(dipu_inputs), _leaves(cpu_inputs), strict=False)
                   if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) and a.device.type == "dipu"]
        message = _judge([a for a, _ in tensors], [e for _, e in tensors], None, name, values, "input after call")
    return message


def _run_backward(op: Any, sample: Any, name: str, values: bool, fp64: bool) -> str | None:
    expected, cotangents = _cpu(lambda: _backward(op, sample, "cpu", None))
    if expected is None:
        return "no-grad"
    expected_fp64 = None
    if fp64 and values:
        try:
            expected_fp64 = _backward(op, sample, "cpu", cotangents, fp64=True)[0]
        except Exception:  # noqa: BLE001
            expected_fp64 = None
    actual, _ = _backward(op, sample, "dipu", cotangents)
    if actual is None:
        return "dipu produced no differentiable output"
    return _judge(actual, expected, expected_fp64, name, values, "grad")


# ----------------------------------------------------------------------------------------------- summary


def summarize(results: dict[str, dict[str, Outcome]]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for mode in MODES:
        c = {"pass": 0, "fail": 0, "skip": 0}
        for per_mode in results.values():
            c[per_mode[mode].status] += 1
        c["total"] = c["pass"] + c["fail"]
        counts[mode] = c
    return counts
