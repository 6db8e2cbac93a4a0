"""Run PyTorch's OpInfo database on dipu against CPU: the machinery behind ``test_opinfo.py``.

For every OpInfo entry that supports float32 on CPU, :func:`run_op` runs up to ``MAX_SAMPLES`` sample
inputs on CPU and on dipu and judges the results with :mod:`diopi.compare` (float64 reference when the
op supports float64). ``mode`` is ``"forward"`` (outputs, and inputs after the call to catch unexpected
mutation) or ``"backward"`` (gradients of every input that requires grad under a fixed random
cotangent). The outcome is pass, fail (reason) or skip (reason: the op cannot be run on CPU either).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from conformance_common import (
    NO_GRAD,
    Outcome,
    Suite,
    cotangents_for,
    error,
    judge,
    judge_with_reference,
    leaves,
    load_json,
    mover,
    on_cpu,
    run_samples,
    with_timeout,
)
from torch.testing._internal import common_utils
from torch.testing._internal.opinfo import core as opinfo_core
from torch.utils._pytree import tree_map

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "opinfo_expected_failures.json"
SKIPS = HERE / "opinfo_skips.json"
MODES = ("forward", "backward")
MAX_SAMPLES = 8
OP_TIMEOUT = 600  # seconds; only a hang gets anywhere near it (an op takes well under one)

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


def full_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@functools.cache
def conformance_ops() -> dict[str, Any]:
    """Every OpInfo entry supporting float32 on CPU, by full name, in op_db order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {full_name(op): op for op in op_db if torch.float32 in op.supported_dtypes("cpu")}


def load_expectations() -> dict[str, dict[str, str]]:
    """The expected failures: op -> {mode: reason}."""
    return load_json(EXPECTATIONS)


# ----------------------------------------------------------------------------------------------- running


def _device_kwargs(kwargs: dict, device: str) -> dict:
    if "device" in kwargs and kwargs["device"] in ("cpu", torch.device("cpu")):
        return {**kwargs, "device": device}
    return kwargs


def _prepare(sample: Any, device: str, fp64: bool, name: str) -> tuple[Any, tuple, dict]:
    dtype = torch.float64 if fp64 else None
    move = mover(device, dtype)
    inp = tree_map(move, sample.input)
    # Some ops take index tensors that must live on the CPU whatever the device (as on CUDA).
    args, kwargs = tree_map(move if name not in CPU_ARGUMENT_OPS else mover("cpu", dtype),
                            (tuple(sample.args), dict(sample.kwargs)))
    return inp, args, _device_kwargs(kwargs, device)


def _grad_leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in leaves(tree) if isinstance(t, torch.Tensor) and t.requires_grad]


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
    return [t for t in leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.is_floating_point() or t.is_complex())]


def _backward(op: Any, sample: Any, device: str, cotangents: list[torch.Tensor] | None, fp64: bool = False) -> Any:
    """Gradients of the sample's grad-requiring inputs; returns (grads, cotangents used)."""
    inp, args, kwargs = _prepare(sample, device, fp64, op.name)
    grad_leaves = _grad_leaves((inp, args, kwargs))
    outs = _differentiable_outputs(_call(op, inp, args, kwargs, backward=True), sample)
    if not grad_leaves or not outs:
        return None, None
    if cotangents is None:
        cotangents = cotangents_for(outs)
    grad_outputs = [c.to(device=o.device, dtype=o.dtype) for c, o in zip(cotangents, outs, strict=True)]
    grads = torch.autograd.grad(outs, grad_leaves, grad_outputs, allow_unused=True)
    return list(grads), cotangents


def _samples(op: Any, backward: bool) -> Iterator[Any]:
    # OpInfo looks for the unittest test being run (sample skips, input tracking) by crawling the whole call
    # stack with inspect.stack(), which reads the source lines of every frame. There is none here; under
    # pytest-xdist the deeper stack made that crawl half of the run time.
    with mock.patch.object(common_utils, "extract_test_fn", _no_test), mock.patch.object(
        opinfo_core, "extract_test_fn", _no_test
    ):
        return op.sample_inputs("cpu", torch.float32, requires_grad=backward)


def _no_test() -> None:
    return None


def run_op(name: str, mode: str) -> Outcome:
    """Run ``mode`` ("forward" or "backward") of OpInfo entry ``name`` on dipu against CPU."""
    op = conformance_ops()[name]
    if name in EXCLUDED_OPS:
        return Outcome("skip", EXCLUDED_OPS[name])
    backward = mode == "backward"
    if backward and not op.supports_autograd:
        return Outcome("skip", "op does not support autograd")
    return with_timeout(lambda: _run_samples(op, name, backward), OP_TIMEOUT)


def _run_samples(op: Any, name: str, backward: bool) -> Outcome:
    torch.manual_seed(zlib.crc32(name.encode()))
    try:
        samples = list(islice(_samples(op, backward), MAX_SAMPLES))
    except Exception as exc:  # noqa: BLE001
        return Outcome("skip", f"sample generation fails on CPU: {error(exc)}")
    values = name not in RANDOM_OPS and name not in UNINITIALIZED_OPS
    fp64 = torch.float64 in op.supported_dtypes("cpu")
    check = _run_backward if backward else _run_forward
    return run_samples(samples, lambda sample: check(op, sample, name, values, fp64),
                       lambda i, _: f"sample {i}", backward)


def _run_forward(op: Any, sample: Any, name: str, values: bool, fp64: bool) -> str | None:
    expected, cpu_inputs = on_cpu(lambda: _forward(op, sample, "cpu"))
    actual, dipu_inputs = _forward(op, sample, "dipu")
    reference = _fp64_or_none(lambda: _forward(op, sample, "cpu", fp64=True)[0]) if fp64 else None
    message = judge_with_reference(actual, expected, reference, name, values, "output")
    if message is None:
        # Inputs after the call: in-place ops must write, others must not mutate.
        tensors = [(a, e) for a, e in zip(leaves(dipu_inputs), leaves(cpu_inputs), strict=False)
                   if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) and a.device.type == "dipu"]
        message = judge([a for a, _ in tensors], [e for _, e in tensors], None, name, values, "input after call")
    return message


def _run_backward(op: Any, sample: Any, name: str, values: bool, fp64: bool) -> str | None:
    expected, cotangents = on_cpu(lambda: _backward(op, sample, "cpu", None))
    if expected is None:
        return NO_GRAD
    actual, _ = _backward(op, sample, "dipu", cotangents)
    if actual is None:
        return "dipu produced no differentiable output"
    reference = _fp64_or_none(lambda: _backward(op, sample, "cpu", cotangents, fp64=True)[0]) if fp64 else None
    return judge_with_reference(actual, expected, reference, name, values, "grad")


def _fp64_or_none(fn: Callable[[], Any]) -> Callable[[], Any]:
    """The float64 reference as :func:`judge_with_reference` asks for it: None when it fails."""

    def reference() -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001
            return None

    return reference


def suite() -> Suite:
    """This harness as the expectations updater sees it."""
    return Suite(title="OpInfo", noun="op", modes=MODES, expectations=EXPECTATIONS, skips=SKIPS,
                 doc=HERE.parents[1] / "docs" / "opinfo.md", script="update_opinfo_expectations.py",
                 entries=conformance_ops, run=run_op)

