"""``ditorch demo``: train a tiny model of one of the seeds' families for a few steps on the best available device.

The whole training loop is :func:`train`; the models and their data come from :mod:`ditorch.models`
(``--model NAME``, default the tiny Llama; ``--list-models`` lists them). Data are synthetic: a random token
pattern (from a seeded generator) repeated along the sequence, so a correct device makes the loss fall visibly
within a few steps.

``--autocompare`` trains under :class:`op_tools.OpAutoCompare` (every operator call on the device checked
against the CPU). ``--fault OP:KIND[:PARAM]`` rehearses a debugging session: it injects a droplet fault
for the run (only on droplet's simulated dipu device), checks with OpAutoCompare and names the op the tool
found first; the exit status says whether the tool found the fault (0) or not (1).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from diopi.env import ConfigError
from ditorch.device import best_device, parse_device
from ditorch.models import (
    BATCH_SIZE,
    DEFAULT_LR,
    DEFAULT_MODEL,
    DEFAULT_SEED,
    DEFAULT_STEPS,
    FAMILIES,
    SEQ_LEN,
    get_family,
)

#: Exit status of a demo that cannot run as asked (``--fault`` without droplet's dipu, a malformed fault).
EXIT_USAGE = 2


@dataclass
class DemoResult:
    device: torch.device
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train(device: torch.device, steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED, lr: float = DEFAULT_LR,
          on_step: Callable[[int, float], None] | None = None,
          watch: AbstractContextManager | None = None, model: str = DEFAULT_MODEL) -> DemoResult:
    """Train the tiny ``model`` (a :data:`ditorch.models.FAMILIES` name) for ``steps`` AdamW steps on ``device``;
    ``on_step(step, loss)`` after each.

    ``watch`` (an op tool such as :class:`op_tools.OpAutoCompare`, or any context manager) is active
    around the training steps.
    """
    family = get_family(model)
    network = family.build(seed).to(device)
    optimizer = torch.optim.AdamW(network.parameters(), lr=lr)
    result = DemoResult(device)
    start = time.perf_counter()
    with watch if watch is not None else contextlib.nullcontext():
        for step in range(1, steps + 1):
            loss = network(**family.batch(step - 1, seed, device)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            value = loss.item()
            result.losses.append(value)
            if on_step is not None:
                on_step(step, value)
    result.seconds = time.perf_counter() - start
    return result


def describe(device: torch.device) -> str:
    """``dipu:0 (droplet (simulated accelerator))``: the device plus the name its device module reports."""
    if device.type == "cpu":
        return "cpu"
    index = device.index if device.index is not None else 0
    try:
        name = torch.get_device_module(device).get_device_name(index)
    except Exception:  # a backend without get_device_name still runs the demo
        return str(torch.device(device.type, index))
    return f"{torch.device(device.type, index)} ({name})"


class DemoError(ConfigError):
    """The demo cannot run as asked; the message says why (a :class:`~diopi.env.ConfigError`: the ``ditorch``
    command prints it as one line, exit status 2)."""


def fault_switches(target: torch.device, fault: str) -> AbstractContextManager:
    """droplet's switches injecting ``fault`` (``DROPLET_FAULTS`` syntax: ``OP:KIND[:PARAM]``, comma-separated)
    inside a ``with`` block. :class:`DemoError` unless ``target`` is droplet's simulated dipu device."""
    if target.type != "dipu":
        raise DemoError(f"--fault injects a fault into droplet, the simulated dipu device, but the demo runs on "
                        f"{target} (use --device dipu)")
    from torch_dipu.vendors import droplet

    try:
        droplet.runtime()
    except RuntimeError as exc:
        raise DemoError(f"--fault needs droplet's simulated dipu device: {exc} (DIPU_DEVICE=droplet selects it)") \
            from None
    try:
        faults = droplet.parse_faults(fault, source="--fault")
    except ValueError as exc:
        raise DemoError(str(exc)) from None
    if not faults:
        raise DemoError("--fault: no fault given (example: --fault linear:bias:0.5)")
    return droplet.switches(faults=faults)


def describe_row(row: dict[str, Any]) -> str:
    """``torch.nn.functional.linear forward out (call #12, step 0, at model.py:40 forward: ...)``: one result row."""
    return (f"{row.get('name')} {row.get('phase')} {row.get('index')} "
            f"(call #{row.get('id')}, step {row.get('step')}, at {row.get('call_site')})")


def list_models() -> int:
    """``ditorch demo --list-models``: print one line per model family (name, what it exercises); exit code 0."""
    width = max(len(name) for name in FAMILIES)
    for family in FAMILIES.values():
        print(f"{family.name:<{width}}  {family.description}")
    return 0


def run(steps: int = DEFAULT_STEPS, device: str | None = None, seed: int = DEFAULT_SEED, lr: float = DEFAULT_LR,
        autocompare: bool = False, fault: str | None = None, results_dir: str | Path | None = None,
        model: str = DEFAULT_MODEL) -> int:
    """The ``ditorch demo`` command: returns the process exit code.

    ``model`` names the model family (:data:`ditorch.models.FAMILIES`); an unknown name exits with status 2.

    ``autocompare`` trains under OpAutoCompare (results under ``results_dir``, else ``OP_TOOLS_RESULTS_DIR``,
    else ``op_tools_results``). ``fault`` implies it and injects that droplet fault; the exit code is then 0
    when OpAutoCompare reported a FAIL (the rehearsal worked) and 1 when it reported none.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(highlight=False, soft_wrap=True)
    try:  # every input checked before any work: one line and exit status 2 for the first bad one
        family = get_family(model)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
            raise DemoError(f"--lr {lr!r}: expected a finite number greater than 0 (e.g. 1e-3)")
        target = best_device(parse_device(device) if device is not None else None)
        inject: AbstractContextManager = contextlib.nullcontext()
        if fault is not None:
            inject = fault_switches(target, fault)
        if (autocompare or fault is not None) and target.type == "cpu":
            raise DemoError("--autocompare checks a device against the CPU, but the demo runs on the CPU")
    except ConfigError as exc:
        hint = " (ditorch demo --list-models)" if model not in FAMILIES else ""
        print(f"ditorch demo: error: {exc}{hint}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    console.print(f"device: {describe(target)}")
    images = f" + {family.image_tokens} image tokens" if family.image_tokens else ""
    console.print(f"model: {escape(family.title)}, batch {BATCH_SIZE}x{SEQ_LEN}{images}, AdamW lr={lr:g}, seed {seed}")
    checker = None
    if fault is not None:
        console.print(f"fault: {escape(fault)} injected into droplet for the run")
    if autocompare or fault is not None:
        from op_tools import OpAutoCompare

        checker = OpAutoCompare(device=target, results_dir=results_dir)
        console.print("checking: OpAutoCompare compares every operator call with the CPU (slower)")
    progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[loss]}"), console=console, transient=True,
                        disable=not console.is_terminal)  # logs and pipes get the step lines only
    with progress, inject:
        task = progress.add_task("train", total=steps, loss="")

        def on_step(step: int, loss: float) -> None:
            progress.console.print(f"step {step:>{len(str(steps))}}/{steps}  loss {loss:.4f}")
            progress.update(task, advance=1, loss=f"loss {loss:.4f}")

        result = train(target, steps=steps, seed=seed, lr=lr, on_step=on_step, watch=checker, model=model)
    status = 0
    if not result.losses:
        console.print(f"done: device {target}, 0 steps")
    else:
        first, last = result.losses[0], result.losses[-1]
        console.print(f"done: device {target}, {steps} steps, loss {first:.4f} -> {last:.4f}, "
                      f"{result.seconds:.2f} s ({1000 * result.seconds / steps:.0f} ms/step)")
        if not all(math.isfinite(x) for x in result.losses):
            console.print("[red]error: the loss is not finite[/red]")
            status = 1
    return status if checker is None else report_check(console, checker, fault, status)


def report_check(console: Any, checker: Any, fault: str | None, status: int) -> int:
    """Print what OpAutoCompare found (counts, the first FAIL, the HTML report); the exit code."""
    from rich.markup import escape

    counts = checker.counts
    verdicts = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("PASS", "NOISE", "SKIP", "FAIL"))
    console.print(f"autocompare: {sum(counts.values())} checks: {verdicts}; results in {escape(str(checker.run_dir))}")
    failures = checker.failures if counts.get("FAIL") else []
    if failures:
        console.print(f"first FAIL: {escape(describe_row(failures[0]))}")
    report = checker.run_dir / "report.html" if checker.run_dir is not None else None
    if report is not None and report.is_file():
        console.print(f"report: {escape(str(report))}")
    if fault is None:
        return status
    if not failures:
        console.print(f"[red]OpAutoCompare found no FAIL: the fault {escape(fault)} was not caught[/red]")
        return 1
    return 0
