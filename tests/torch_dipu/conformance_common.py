"""What the OpInfo and ModuleInfo conformance harnesses share: outcomes, judging, the sample loop, timeouts.

Both harnesses run PyTorch's own test databases on dipu against the CPU (``opinfo_harness.py``,
``moduleinfo_harness.py``). A run of one entry in one mode gives an :class:`Outcome`; results are judged by
:func:`judge` (structure, dtype, shape and device checks, then :func:`diopi.compare.compare_outputs`);
:func:`run_samples` runs every sample (the count is capped by the harness, never by time, so a verdict
does not depend on machine speed), and :func:`with_timeout` turns a hang into a failure. :class:`Suite`
describes a harness to the shared expectations updater (``conformance_update.py``).
"""

from __future__ import annotations

import json
import signal
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi.compare import Verdict, compare_outputs

NO_GRAD = "no-grad"  # what a backward check returns when the sample has nothing to differentiate


@dataclass(frozen=True)
class Outcome:
    """The result of one entry in one mode: ``status`` is "pass", "fail" or "skip"."""

    status: str
    reason: str = ""


@dataclass(frozen=True)
class Suite:
    """A conformance harness as the expectations updater sees it."""

    title: str  # "OpInfo"
    noun: str  # what an entry is: "op", "module"
    modes: tuple[str, ...]
    expectations: Path  # name -> {mode: reason} of the expected failures
    skips: Path  # name -> {mode: reason} of the skips
    doc: Path  # the page whose generated section is rewritten
    script: str  # the update script's file name (marks the generated section)
    entries: Callable[[], dict[str, Any]]  # every entry of the suite, by name, in database order
    run: Callable[[str, str], Outcome]  # run(name, mode)


class CpuError(Exception):
    """The reference run on CPU failed: the sample is unusable."""


class Timeout(BaseException):
    """Raised by the alarm of :func:`with_timeout`."""


def load_json(path: Path) -> dict[str, dict[str, str]]:
    """An expectations or skips file (name -> {mode: reason}); empty when missing."""
    return json.loads(path.read_text()) if path.exists() else {}


# ----------------------------------------------------------------------------------------------- comparison


def first_line(text: str, limit: int = 160) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def leaves(tree: Any) -> list:
    """The leaves of a pytree."""
    return tree_flatten(tree)[0]


def compare_values(actual: list, expected: list, expected_fp64: list | None, name: str) -> str | None:
    """None when every tensor passes the comparison rules (diopi.compare), else the first failure message."""
    for r in compare_outputs(actual, expected, expected_fp64=expected_fp64, op=name):
        if r.verdict is Verdict.FAIL:
            return first_line(r.message.removeprefix("FAIL "))
    return None


def judge(actual: Any, expected: Any, expected_fp64: Any, name: str, values: bool, what: str) -> str | None:
    """Compare two pytrees of results (dipu against CPU); None when they agree.

    Every CPU tensor needs a dipu tensor of the same shape and dtype on dipu; with ``values`` the tensors
    are judged by :func:`compare_values` (against ``expected_fp64`` too when given for every tensor) and
    plain values must be equal.
    """
    a_leaves, e_leaves = leaves(actual), leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return f"{what}: {len(a_leaves)} results on dipu, {len(e_leaves)} on CPU"
    f_leaves = leaves(expected_fp64) if expected_fp64 is not None else None
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
        elif e is None and isinstance(a, torch.Tensor):
            return f"{what}[{i}]: dipu returned a tensor, CPU None"
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
    message = compare_values(a_t, e_t, f_t if use_fp64 else None, name)
    return f"{what} {message}" if message else None  # e.g. "grad out[0]: 3/20 elements ..."


def judge_with_reference(actual: Any, expected: Any, reference: Callable[[], Any] | None, name: str, values: bool,
                         what: str) -> str | None:
    """:func:`judge`, asking ``reference()`` for the float64 results only when the comparison without them
    fails: the float64 reference only ever turns an out-of-tolerance FAIL into PASS (noise), so computing it
    for results that agree would change no verdict."""
    message = judge(actual, expected, None, name, values, what)
    if message is None or reference is None or not values:
        return message
    expected_fp64 = reference()
    return message if expected_fp64 is None else judge(actual, expected, expected_fp64, name, values, what)


# ----------------------------------------------------------------------------------------------- running


def mover(device: str, dtype: torch.dtype | None = None) -> Callable[[Any], Any]:
    """A pytree-leaf function: tensors are copied to ``device`` (float32 ones to ``dtype`` when given),
    keeping ``requires_grad`` and strides; a CPU device argument becomes ``device``."""

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            t = x.detach()
            if dtype is not None and t.dtype == torch.float32:
                t = t.to(dtype)
            t = t.to(device) if device != "cpu" else t.clone()
            return t.requires_grad_(x.requires_grad)
        if device != "cpu" and (x == "cpu" if isinstance(x, str) else isinstance(x, torch.device) and x.type == "cpu"):
            return torch.device(device)  # a device argument (factories, ``Tensor.to``)
        return x

    return move


def on_cpu(fn: Callable[[], Any]) -> Any:
    """Run the CPU reference; its failure becomes :class:`CpuError` (the sample is unusable)."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        raise CpuError(error(exc)) from exc


def cotangents_for(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Fixed random cotangents (on CPU) for differentiable outputs."""
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outputs]


def run_samples(samples: Iterable[Any], check: Callable[[Any], str | None], label: Callable[[int, Any], str],
                backward: bool) -> Outcome:
    """Check samples in order until one fails.

    ``check(sample)`` returns None (agrees), a failure message, or :data:`NO_GRAD` (nothing to
    differentiate: not counted), and raises :class:`CpuError` when the sample fails on CPU (not counted).
    Any other exception on dipu is a failure.
    """
    ran = 0
    cpu_errors: list[str] = []
    for i, sample in enumerate(samples):
        try:
            message = check(sample)
        except CpuError as exc:
            cpu_errors.append(str(exc))
            continue
        except Timeout:
            raise
        except Exception as exc:  # noqa: BLE001
            return Outcome("fail", f"{label(i, sample)}: {error(exc)}")
        if message == NO_GRAD:
            continue
        ran += 1
        if message:
            return Outcome("fail", f"{label(i, sample)}: {message}")
    if ran:
        return Outcome("pass")
    if cpu_errors:
        return Outcome("skip", f"every sample fails on CPU: {cpu_errors[0]}")
    if backward:
        return Outcome("skip", "no sample has a differentiable output")
    return Outcome("skip", "no samples")


def _on_alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def with_timeout(run: Callable[[], Outcome], seconds: int) -> Outcome:
    """``run()`` single-threaded with warnings silenced; still running after ``seconds`` (a hang) is a failure.

    The samples are tiny: intra-op threads only add synchronization, and under pytest-xdist (a worker per
    core) their spinning multiplies the run time. CPU and dipu (whose reference vendor runs CPU kernels)
    run with the same setting, so reductions stay comparable.
    """
    alarm = hasattr(signal, "SIGALRM")
    if alarm:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(seconds)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return run()
    except Timeout:
        return Outcome("fail", f"timeout: still running after {seconds}s")
    finally:
        torch.set_num_threads(threads)
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------------------------- summary


def summarize(results: dict[str, dict[str, Outcome]], modes: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per mode: how many entries pass, fail and skip; ``total`` is pass + fail (the pass-rate denominator)."""
    counts: dict[str, dict[str, int]] = {}
    for mode in modes:
        c = {"pass": 0, "fail": 0, "skip": 0}
        for per_mode in results.values():
            c[per_mode[mode].status] += 1
        c["total"] = c["pass"] + c["fail"]
        counts[mode] = c
    return counts


def check_expected(suite: Suite, expected: dict[str, dict[str, str]], name: str, mode: str) -> None:
    """Run ``name`` in ``mode`` and hold the outcome to the expectations (the body of each suite's test)."""
    import pytest

    outcome = suite.run(name, mode)
    listed = expected.get(name, {}).get(mode)
    if outcome.status == "skip":
        pytest.skip(outcome.reason)
    if listed is not None and outcome.status == "pass":
        pytest.fail(
            f"{name} {mode} now passes but is listed as failing ({listed!r}): remove it from "
            f"{suite.expectations.name} (or run {suite.script} {name})"
        )
    if listed is None and outcome.status == "fail":
        pytest.fail(f"{name} {mode} fails on dipu: {outcome.reason}")


def expectation_problems(suite: Suite, expected: dict[str, dict[str, str]]) -> list[str]:
    """What is wrong with an expectations file: entries that are not in the suite, or malformed ones."""
    problems = []
    stale = sorted(set(expected) - set(suite.entries()))
    if stale:
        problems.append(f"{suite.expectations.name} lists {suite.noun}s no longer in the {suite.title} suite: {stale}")
    bad = sorted(n for n, modes in expected.items() if not modes or set(modes) - set(suite.modes))
    if bad:
        problems.append(f"{suite.expectations.name}: entries need a non-empty {{mode: reason}} with modes in "
                        f"{suite.modes}: {bad}")
    return problems
