"""``ditorch parity``: does a script train the same on this device as on the CPU?

:func:`run_parity` runs the unmodified script twice, each in a fresh interpreter (``sys.executable``):

- the **reference run** on the CPU, with ditorch's cuda mapping pointed at the CPU (``DITORCH_VENDOR=cpu``), so
  CUDA-written code (``.cuda()``, ``device="cuda"``) runs there unchanged; it answers the queries a script chooses
  its dtype by (``torch.cuda.is_bf16_supported()``, ``get_device_capability()``) as the device does (asked first,
  ``python -m ditorch.parity_run --probe``), so both runs take the same branch;
- the **device run** with ditorch and the present vendor, under :class:`op_tools.random_on_cpu.OpRandomOnCPU`:
  every random call (dropout, ``rand*``, ``normal_``, attention dropout, random factories with ``device=``)
  draws from the CPU generator and its result moves to the device, so both runs see the same masks.

Both start from the same seeds (:data:`SEED` for torch, ``random`` and numpy; the script's own seeding still
applies), both are dumped with :class:`~module_tools.dump.ModuleDump` (the model found as
``ditorch dump-modules`` finds it) for steps ``0..N-1`` and ended at the N-th ``optimizer.step()``; then
:func:`~module_tools.compare.compare_runs` names the first divergence. The output folder holds ``ref/``,
``test/``, ``ref.log``, ``test.log`` (each run's output; ``ref.stderr.log``, ``test.stderr.log``: its stderr alone),
``report.html`` and ``report.json``. A run that fails is named (reference or device run) with its exit status
and the last lines of its stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diopi.case_format import atomic_open

__all__ = ["DEFAULT_STEPS", "RUN_NAMES", "SEED", "ParityResult", "run_parity"]

#: Steps compared when none are asked for: two, so that a difference in the optimizer's update shows in the
#: second step's forward.
DEFAULT_STEPS = 2
#: The seed of torch, ``random`` and numpy in both runs before the script starts.
SEED = 0
RUN_NAMES = {"ref": "reference run (CPU)", "test": "device run"}
_TAIL_LINES = 20


@dataclass
class ParityResult:
    """What :func:`run_parity` found: ``status`` 0 (no divergence), 1 (a divergence) or 2 (a run failed,
    nothing aligns); ``lines`` what it printed; ``comparison`` the :class:`~module_tools.compare.RunComparison`
    (None when status is 2)."""

    status: int
    lines: list[str]
    out: Path
    comparison: Any = None
    failed_run: str | None = None

    @property
    def html(self) -> Path:
        return self.out / "report.html"

    @property
    def json(self) -> Path:
        return self.out / "report.json"


def _child_env(run: str, env: Mapping[str, str] | None) -> dict[str, str]:
    base = dict(os.environ if env is None else env)
    base = {k: v for k, v in base.items() if not k.startswith("MODULE_DUMP_")}
    if run == "ref":
        base["DITORCH_VENDOR"] = "cpu"
    return base


def _device_answers(env: Mapping[str, str] | None) -> str:
    """The device's answers to the dtype-choosing ``torch.cuda`` queries (``ditorch.parity_run.PROBED``), as JSON,
    asked in the device run's environment; ``"{}"`` when the probe fails (the device run then fails and is named)."""
    proc = subprocess.run([sys.executable, "-m", "ditorch.parity_run", "--probe"], env=_child_env("test", env),
                          capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return "{}"
    try:
        answers = json.loads(lines[-1])
    except ValueError:
        return "{}"
    return json.dumps(answers) if isinstance(answers, dict) else "{}"


def _run_child(run: str, script: str, args: Sequence[str], steps: int, out: Path, stats_only: bool,
               random_on_cpu: bool, env: Mapping[str, str] | None, fixed_input: Path | None = None,
               device_answers: str | None = None) -> tuple[int, str]:
    """One run in a fresh interpreter; its exit status and the end of its output for the console. Its output is
    kept under ``out``: ``<run>.log`` (stdout, then stderr) and ``<run>.stderr.log`` (stderr alone)."""
    command = [sys.executable, "-m", "ditorch.parity_run", "--child", run, "--steps", str(steps),
               "--out", str(out / run)]
    command += ["--stats-only"] * stats_only + ["--no-random-on-cpu"] * (not random_on_cpu)
    command += ["--fixed-input", str(fixed_input)] if fixed_input is not None else []
    command += ["--device-answers", device_answers] if device_answers is not None else []
    proc = subprocess.run([*command, "--", script, *args], env=_child_env(run, env), capture_output=True, text=True)
    for name, text in ((f"{run}.log", proc.stdout + proc.stderr), (f"{run}.stderr.log", proc.stderr)):
        with atomic_open(out / name, "w", encoding="utf-8") as f:
            f.write(text)
    return proc.returncode, _tail(proc.stdout, proc.stderr)


def _tail(stdout: str, stderr: str) -> str:
    """The last :data:`_TAIL_LINES` lines of a run's stderr (of its stdout when stderr is empty), indented; what
    the console shows of a run that failed."""
    for name, text in (("stderr", stderr), ("stdout", stdout)):
        lines = [line for line in text.rstrip().splitlines() if line.strip()]
        if lines:
            shown = lines[-_TAIL_LINES:]
            head = f"the last {len(shown)} lines of its {name}" if len(lines) > len(shown) else f"its {name}"
            return head + ":\n" + "\n".join(f"  | {line}" for line in shown)
    return "it printed nothing on stdout or stderr"


def run_parity(script: str, args: Sequence[str] = (), steps: int = DEFAULT_STEPS, out: str | os.PathLike[str] =
               "parity", stats_only: bool = False, reference: str | os.PathLike[str] | None = None,
               random_on_cpu: bool = True, env: Mapping[str, str] | None = None,
               fixed_input: bool = False, progress: Callable[[str], None] | None = None) -> ParityResult:
    """Run ``script args`` on the CPU and on the device for ``steps`` steps, compare the two module dumps and
    return the verdict. ``reference``: an existing reference dump (a ``ref/`` folder of an earlier parity run)
    to compare with instead of running the reference again. ``random_on_cpu=False`` lets the device run draw
    from the device's generator (to see what the mechanism is for). ``env``: the runs' environment (default
    this process's). ``fixed_input``: the device run also replays every call on the reference run's inputs
    (fixed-input mode; the reference dump must be full), so the report names each module's own error.
    ``progress``: called with one line as each run starts and as it ends (``ditorch parity`` prints them)."""
    from .compare import compare_runs

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not os.path.isfile(script):
        return ParityResult(2, [f"ditorch parity: no such script: {script}"], out_dir)
    runs = ["test"] if reference is not None else ["ref", "test"]
    ref_dir = Path(reference) if reference is not None else out_dir / "ref"
    if fixed_input and stats_only and reference is None:
        return ParityResult(2, ["ditorch parity: --fixed-input replays the reference run's inputs and needs full "
                                "dumps; drop --stats-only"], out_dir)
    say = progress or (lambda line: None)
    for number, run in enumerate(runs, 1):
        shutil.rmtree(out_dir / run, ignore_errors=True)
        replay = ref_dir if fixed_input and run == "test" else None
        say(f"ditorch parity: [{number}/{len(runs)}] the {RUN_NAMES[run]}: {steps} step{'s' * (steps != 1)} of "
            f"{script} (output in {out_dir / f'{run}.log'}) ...")
        start = time.perf_counter()
        answers = _device_answers(env) if run == "ref" else None
        status, tail = _run_child(run, script, args, steps, out_dir, stats_only, random_on_cpu, env, replay, answers)
        seconds = time.perf_counter() - start
        if status != 0:
            say(f"ditorch parity: [{number}/{len(runs)}] the {RUN_NAMES[run]} failed after {seconds:.1f} s")
            lines = [f"ditorch parity: the {RUN_NAMES[run]} failed (exit status {status}); {tail}",
                     f"ditorch parity: its whole output: {out_dir / f'{run}.log'} (stderr alone: "
                     f"{out_dir / f'{run}.stderr.log'})"]
            return ParityResult(2, lines, out_dir, failed_run=run)
        say(f"ditorch parity: [{number}/{len(runs)}] the {RUN_NAMES[run]} done in {seconds:.1f} s")
    try:
        comparison = compare_runs(ref_dir, out_dir / "test")
    except ValueError as exc:  # nothing aligns, a missing or damaged dump
        return ParityResult(2, [f"ditorch parity: {exc}"], out_dir)
    result = ParityResult(1 if comparison.diverged else 0, [comparison.summary()], out_dir, comparison)
    comparison.write_json(result.json)
    comparison.write_html(result.html)
    result.lines += [f"HTML report: {result.html}", f"JSON: {result.json}"]
    return result
