"""Run PyTorch's ModuleInfo database on dipu against CPU: the machinery behind ``test_moduleinfo.py``.

For every ModuleInfo entry whose dtypes include float32, :func:`run_module` runs up to ``MAX_SAMPLES``
samples of ``module_inputs_func`` in one of four modes: forward or backward, in train or eval mode. Per
sample the module is built on the CPU from the sample's constructor input (fixed seed), deep-copied and
moved with ``.to("dipu")`` (``Module._apply``, the path users take), and both copies run the same forward
inputs. Judged with :mod:`diopi.compare` (float64 reference when the module supports float64): the
module state after ``.to`` (parameter and buffer counts, devices, values), the outputs, the state after
the forward (running statistics, in-place weight updates) and the inputs after the call; in backward
modes the gradients of every input that requires grad and of every parameter under a fixed random
cotangent. The outcome is pass, fail (reason) or skip (reason: the module cannot be run on CPU either).
"""

from __future__ import annotations

import copy
import functools
import zlib
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

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
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedTensorMixin
from torch.nn.utils.rnn import PackedSequence
from torch.utils._pytree import tree_map

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "moduleinfo_expected_failures.json"
SKIPS = HERE / "moduleinfo_skips.json"
MODES = ("forward-train", "forward-eval", "backward-train", "backward-eval")
MAX_SAMPLES = 8
MODULE_TIMEOUT = 600  # seconds; only a hang gets anywhere near it (a module takes well under one)

# Modules left out entirely (name -> reason): too slow for the CI budget or unusable by this harness.
EXCLUDED_MODULES: dict[str, str] = {}


@functools.cache
def conformance_modules() -> dict[str, Any]:
    """Every ModuleInfo entry whose dtypes include float32, by name (``nn.Linear``), in module_db order."""
    from torch.testing._internal.common_modules import module_db

    return {info.name: info for info in module_db if torch.float32 in info.dtypes}


def load_expectations() -> dict[str, dict[str, str]]:
    """The expected failures: module -> {mode: reason}."""
    return load_json(EXPECTATIONS)


# ----------------------------------------------------------------------------------------------- modules


def is_random(module: nn.Module, training: bool) -> bool:
    """Whether the module's values are random (compared by shape and dtype only).

    Dropout of any kind, RReLU, attention and RNN dropout in train mode; FractionalMaxPool without fixed
    ``_random_samples`` in either mode.
    """
    for sub in module.modules():
        if isinstance(sub, nn.FractionalMaxPool2d | nn.FractionalMaxPool3d) and sub._random_samples is None:
            return True
        if not training:
            continue
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p > 0:
            return True
        if isinstance(sub, nn.RReLU):
            return True
        if isinstance(sub, nn.MultiheadAttention | nn.RNNBase) and sub.dropout > 0:
            return True
    return False


def _state(module: nn.Module) -> list[torch.Tensor]:
    """Parameters then buffers, in registration order (materialized ones: lazy parameters are skipped)."""
    return [t for t in (*module.parameters(), *module.buffers()) if not isinstance(t, UninitializedTensorMixin)]


def _check_moved(cpu: nn.Module, dipu: nn.Module, name: str) -> str | None:
    """The dipu copy after ``.to("dipu")``: as many parameters and buffers as on CPU, on dipu, same values."""
    for what, c, d in (("parameters", list(cpu.parameters()), list(dipu.parameters())),
                       ("buffers", list(cpu.buffers()), list(dipu.buffers()))):
        if len(c) != len(d):
            return f"after .to('dipu'): {len(d)} {what}, {len(c)} on CPU"
        for i, (ct, dt) in enumerate(zip(c, d, strict=True)):
            if dt.device.type != "dipu":
                return f"after .to('dipu'): {what}[{i}] is on {dt.device}"
            if isinstance(ct, nn.Parameter) and not isinstance(dt, nn.Parameter):
                return f"after .to('dipu'): {what}[{i}] is a {type(dt).__name__}, not a Parameter"
            if isinstance(ct, UninitializedTensorMixin) and not isinstance(dt, UninitializedTensorMixin):
                return (f"after .to('dipu'): {what}[{i}] is a {type(dt).__name__}{list(dt.shape)}, no longer "
                        f"an {type(ct).__name__} (the lazy module lost its laziness)")
    return judge(_state(dipu), _state(cpu), None, name, True, "state after .to('dipu')")


def _tree(x: Any) -> Any:
    """Outputs with PackedSequences spelled out (batch sizes are CPU tensors on every device: as ints)."""
    if isinstance(x, PackedSequence):
        return (x.data, x.batch_sizes.tolist(), x.sorted_indices, x.unsorted_indices)
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, tuple | list):
        return type(x)(_tree(v) for v in x) if not hasattr(x, "_fields") else tuple(_tree(v) for v in x)
    if isinstance(x, dict):
        return {k: _tree(v) for k, v in x.items()}
    return x


def _move_inputs(tree: Any, device: str, fp64: bool) -> Any:
    """Forward inputs on ``device`` (float32 to float64 for the reference), keeping ``requires_grad``."""
    move = mover(device, torch.float64 if fp64 else None)

    def leaf(x: Any) -> Any:
        if isinstance(x, PackedSequence):  # batch_sizes stays on the CPU on every device
            return PackedSequence(move(x.data), x.batch_sizes, *(None if t is None else move(t)
                                                                  for t in (x.sorted_indices, x.unsorted_indices)))
        return move(x)

    return tree_map(leaf, tree, is_leaf=lambda x: isinstance(x, PackedSequence))


class _Sample:
    """One ModuleInput with its modules: the CPU original, its dipu copy and, on demand, a float64 twin."""

    def __init__(self, info: Any, sample: Any, name: str, training: bool, fp64: bool) -> None:
        self.info, self.sample, self.name, self.training = info, sample, name, training
        self.seed = zlib.crc32(f"{name}/{sample.desc}".encode())
        self.cpu = on_cpu(self._build)
        self.values = not is_random(self.cpu, training)
        self.lazy = any(isinstance(m, LazyModuleMixin) for m in self.cpu.modules())
        self._fp64: nn.Module | None = None
        # A lazy module's float64 twin would draw different initial values: no reference for those.
        self._fp64_wanted = fp64 and self.values and not self.lazy
        self._fp64_results: dict[str, Any] = {}
        # The path users take: a CPU module moved with Module._apply (deep-copied first, lazy modules too);
        # the copy keeps the train/eval flag.
        self.dipu = on_cpu(lambda: copy.deepcopy(self.cpu)).to("dipu")

    def _build(self, twin: bool = False) -> nn.Module:
        """The module from the sample's constructor input, seeded. The float64 twin is built the same way
        from a copy of the input (a constructor may keep a module or tensor it is given)."""
        torch.random.default_generator.manual_seed(self.seed)
        args, kwargs = self.sample.constructor_input.args, self.sample.constructor_input.kwargs
        if twin:
            args, kwargs = copy.deepcopy((args, kwargs))
        # As PyTorch's module tests: constructor tensors (loss weights, FractionalMaxPool's float64
        # _random_samples) are buffers, converted to the sample dtype with the module.
        return self.info.module_cls(*args, **kwargs).to(torch.float32).train(self.training)

    def module(self, which: str) -> nn.Module:
        """The ``which`` ("cpu", "dipu", "fp64") module."""
        if which == "fp64":
            if self._fp64 is None:
                self._fp64 = self._build(twin=True).to(torch.float64)
            return self._fp64
        return self.cpu if which == "cpu" else self.dipu

    def forward(self, which: str, grad: bool) -> tuple[Any, Any]:
        """(output, inputs) of the ``which`` module on the sample's forward input."""
        module = self.module(which)
        fwd = self.sample.forward_input
        args, kwargs = _move_inputs((tuple(fwd.args), dict(fwd.kwargs)), "dipu" if which == "dipu" else "cpu",
                                    which == "fp64")
        call_args, call_kwargs = args, kwargs
        if grad:  # non-leaf copies: in-place modules must not write into leaves that require grad
            call_args, call_kwargs = tree_map(
                lambda t: t.clone() if isinstance(t, torch.Tensor) and t.requires_grad else t, (args, kwargs))
        if self.lazy:  # lazy parameters are initialized at the first forward, from the device's generator
            torch.manual_seed(self.seed)
        with torch.set_grad_enabled(grad):
            out = module(*call_args, **call_kwargs)
        return out, (args, kwargs)

    def reference(self, key: str, fn: Callable[[], Any]) -> Any:
        """The float64 result ``fn()`` (computed once per key), or None without one or when it fails."""
        if not self._fp64_wanted:
            return None
        if key not in self._fp64_results:
            try:
                self._fp64_results[key] = fn()
            except Exception:  # noqa: BLE001
                self._fp64_results[key] = None
        return self._fp64_results[key]


def _differentiable(out: Any) -> list[torch.Tensor]:
    return [t for t in leaves(_tree(out)) if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.is_floating_point() or t.is_complex())]


def _gradients(s: _Sample, which: str, cotangents: list[torch.Tensor] | None) -> tuple[Any, Any]:
    """Gradients of the grad-requiring inputs and of every parameter; (grads, cotangents used)."""
    out, inputs = s.forward(which, grad=True)
    wrt = [t for t in leaves(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    wrt += [p for p in s.module(which).parameters() if p.requires_grad]  # after the forward: lazy ones exist
    outs = _differentiable(out)
    if not wrt or not outs:
        return None, None
    if cotangents is None:
        cotangents = cotangents_for(outs)
    grad_outputs = [c.to(device=o.device, dtype=o.dtype) for c, o in zip(cotangents, outs, strict=True)]
    return list(torch.autograd.grad(outs, wrt, grad_outputs, allow_unused=True)), cotangents


def _check_forward(s: _Sample) -> str | None:
    moved = _check_moved(s.cpu, s.dipu, s.name)  # before the CPU forward changes its state
    if moved:
        return moved
    grad = s.training  # eval runs as inference (no_grad): the path of the fused attention kernels
    expected, cpu_inputs = on_cpu(lambda: s.forward("cpu", grad))
    actual, dipu_inputs = s.forward("dipu", grad)

    def reference_output() -> Any:
        return s.reference("output", lambda: _tree(s.forward("fp64", grad)[0]))

    def reference_state() -> Any:  # the float64 twin's state after its forward
        return None if reference_output() is None else _state(s.module("fp64"))

    message = judge_with_reference(_tree(actual), _tree(expected), reference_output, s.name, s.values, "output")
    if message is None:  # running statistics, in-place weight updates, lazy parameters
        message = judge_with_reference(_state(s.dipu), _state(s.cpu), reference_state, s.name, s.values,
                                       "state after forward")
    if message is None:  # unexpected mutation of the inputs
        message = judge(_tree(dipu_inputs), _tree(cpu_inputs), None, s.name, s.values, "input after call")
    return message


def _check_backward(s: _Sample) -> str | None:
    moved = _check_moved(s.cpu, s.dipu, s.name)  # before the CPU forward changes its state
    if moved:
        return moved
    expected, cotangents = on_cpu(lambda: _gradients(s, "cpu", None))
    if expected is None:
        return NO_GRAD
    actual, _ = _gradients(s, "dipu", cotangents)
    if actual is None:
        return "dipu produced no differentiable output"

    def reference() -> Any:
        return s.reference("grad", lambda: _gradients(s, "fp64", cotangents)[0])

    return judge_with_reference(actual, expected, reference, s.name, s.values, "grad")


# ----------------------------------------------------------------------------------------------- running


def run_module(name: str, mode: str) -> Outcome:
    """Run ``mode`` (one of :data:`MODES`) of ModuleInfo entry ``name`` on dipu against CPU."""
    info = conformance_modules()[name]
    if name in EXCLUDED_MODULES:
        return Outcome("skip", EXCLUDED_MODULES[name])
    direction, _, phase = mode.partition("-")
    return with_timeout(lambda: _run_samples(info, name, direction == "backward", phase == "train"),
                        MODULE_TIMEOUT)


def _run_samples(info: Any, name: str, backward: bool, training: bool) -> Outcome:
    torch.manual_seed(zlib.crc32(name.encode()))
    try:
        samples = list(islice(info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                                      requires_grad=backward, training=training), MAX_SAMPLES))
    except Exception as exc:  # noqa: BLE001
        return Outcome("skip", f"sample generation fails on CPU: {error(exc)}")
    fp64 = torch.float64 in info.dtypes
    check = _check_backward if backward else _check_forward

    def run(sample: Any) -> str | None:
        return check(_Sample(info, sample, name, training, fp64))

    def label(i: int, sample: Any) -> str:
        return f"sample {i} ({sample.desc})" if sample.desc else f"sample {i}"

    return run_samples(samples, run, label, backward)


def suite() -> Suite:
    """This harness as the expectations updater sees it."""
    return Suite(title="ModuleInfo", noun="module", modes=MODES, expectations=EXPECTATIONS, skips=SKIPS,
                 doc=HERE.parents[1] / "docs" / "moduleinfo.md", script="update_moduleinfo_expectations.py",
                 entries=conformance_modules, run=run_module)
