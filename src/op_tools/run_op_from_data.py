"""``python -m op_tools.run_op_from_data DIR [options]`` (also ``ditorch replay``): replay captured cases.

Prints a progress bar while it works and a summary table at the end; writes ``results.jsonl`` and
``results.csv`` under ``<results>/op_replay/<run>/``. Exits 1 if any case failed or could not be
replayed, 2 on bad arguments or when DIR holds no case.

``ditorch replay`` sets up the vendor's device first (it imports ditorch); ``python -m
op_tools.run_op_from_data`` does not, and imports torch_dipu only for ``--device dipu``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from diopi import case_format as cf
from diopi.env import ConfigError, parse_flag
from op_tools import config
from op_tools.replay import CaseResult, ReplayOptions, _device_available, find_cases, replay_case, run_stats

__all__ = ["add_arguments", "main", "run"]


def _flag(text: str | None) -> bool:
    # The seeds wrote `--only_run_forward True`; accept that form as well as the bare flag.
    if text is None:
        return True
    value = parse_flag(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _option(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> None:
    """Option ``name`` (dashed) plus its underscore spelling, upstream's (``--run_times``), as a hidden alias."""
    parser.add_argument(name, **kwargs)
    alias = "--" + name[2:].replace("-", "_")
    if alias != name:
        parser.add_argument(alias, **{**kwargs, "dest": name[2:].replace("-", "_"), "help": argparse.SUPPRESS})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The replay options (shared by ``python -m op_tools.run_op_from_data`` and ``ditorch replay``). Every option
    is dashed (``--run-times``); upstream's underscore spellings (``--run_times``) are accepted as aliases."""
    parser.add_argument("path", metavar="DIR", help="an OpCapture run folder (searched recursively for cases), or "
                                                    "one case folder")
    _option(parser, "--acc-check", nargs="?", const=None, default=False, type=_flag, metavar="BOOL",
            help="judge the device result against the CPU (and float64) instead of the captured output")
    _option(parser, "--run-times", type=config.int_at_least(1), default=1, metavar="N",
            help="runs per case (default 1)")
    _option(parser, "--only-run-forward", nargs="?", const=None, default=False, type=_flag, metavar="BOOL",
            help="skip the backward pass")
    _option(parser, "--sync-time-measure", nargs="?", const=None, default=False, type=_flag, metavar="BOOL",
            help="synchronize the device around each timed run and print every timing")
    parser.add_argument("--device", default=None,
                        help="device to replay on (default: the captured device if present, else the best one)")
    _option(parser, "--allow-module", action="append", default=[], metavar="MODULE",
            help="also call functions of MODULE (cases of op_tools.apply_feature); replay calls only torch "
                 "operators otherwise (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="one table row per case, not only the failures")
    _option(parser, "--results-dir", default=None, metavar="DIR",
            help=f"where results go (default ${config.RESULTS_DIR_ENV} or ./op_tools_results)")


def _normalize(args: argparse.Namespace) -> ReplayOptions:
    # a bare flag (``--acc-check``) is None: on
    flags = {name: getattr(args, name) is None or bool(getattr(args, name))
             for name in ("acc_check", "only_run_forward", "sync_time_measure")}
    return ReplayOptions(device=args.device, run_times=args.run_times, allow_modules=tuple(args.allow_module),
                         **flags)


def _write_results(results: list[CaseResult], results_dir: str | None) -> Path:
    out_dir = config.results_dir(results_dir) / "op_replay" / time.strftime("%Y-%m-%d--%H-%M-%S")
    n = 2
    base = out_dir
    while out_dir.exists():
        out_dir = Path(f"{base}-{n}")
        n += 1
    out_dir.mkdir(parents=True)
    rows = [r.as_row() for r in results]
    with cf.atomic_open(out_dir / "results.jsonl", "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(row) + "\n" for row in rows))
    with cf.atomic_open(out_dir / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["path"])
        writer.writeheader()
        writer.writerows(rows)
    return out_dir


def _summary(results: list[CaseResult]):
    """One row per op: cases by status, bitwise-equal results, mean times."""
    from rich.table import Table

    by_op: dict[str, list[CaseResult]] = {}
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    table = Table(title="replay summary", title_justify="left")
    for column in ("op", "cases", "pass", "fail", "error", "skip", "bitwise", "fwd ms", "bwd ms"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for op, rows in sorted(by_op.items()):
        counts = Counter(r.status for r in rows)
        bits = [b for r in rows for b in (r.bitwise_forward, r.bitwise_backward) if b is not None]
        fwd = [t for r in rows for t in r.forward_ms]
        bwd = [t for r in rows for t in r.backward_ms]
        table.add_row(op, str(len(rows)), *(str(counts[s] or "") for s in ("PASS", "FAIL", "ERROR", "SKIP")),
                      f"{sum(bits)}/{len(bits)}" if bits else "-",
                      f"{sum(fwd) / len(fwd):.3f}" if fwd else "-", f"{sum(bwd) / len(bwd):.3f}" if bwd else "-")
    return table


def _table(results: list[CaseResult], verbose: bool, root: Path):
    from rich.table import Table

    table = Table(title="cases" if verbose else "cases that did not pass", title_justify="left")
    for column in ("case", "op", "status", "forward", "backward", "bitwise", "max abs err", "fwd ms", "bwd ms",
                   "message"):
        table.add_column(column, overflow="fold")
    for r in results:
        if not verbose and r.status in ("PASS",):
            continue
        try:
            case = str(Path(r.path).relative_to(root))
        except ValueError:
            case = r.path
        bits = [b for b in (r.bitwise_forward, r.bitwise_backward) if b is not None]
        bitwise = "-" if not bits else ("yes" if all(bits) else "no")
        fwd, bwd = r.as_row()["forward_ms"], r.as_row()["backward_ms"]
        table.add_row(case or ".", r.op, r.status, r.forward, r.backward, bitwise, f"{r.max_abs_error:.3g}",
                      "-" if fwd is None else f"{fwd:.3f}", "-" if bwd is None else f"{bwd:.3f}", r.message)
    return table


def _print_run_stats(console, timer: str, result: CaseResult) -> None:
    """min/median/max of a case's forward and backward times, after its per-run lines."""
    for phase, times in (("forward", result.forward_ms), ("backward", result.backward_ms)):
        stats = run_stats(times)
        if stats is None:
            continue
        if stats["warmup_excluded"]:
            over = f"runs 2-{len(times)}, run 1 (warm-up) left out"
        else:
            over = "1 run, includes warm-up"
        console.print(f"{timer}: {result.op} {phase} min {stats['min']:.8f} median {stats['median']:.8f} "
                      f"max {stats['max']:.8f} ms ({over})", highlight=False)


def run(args: argparse.Namespace) -> int:
    """Replay the cases ``args`` names; the process exit status."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=200)
    options = _normalize(args)
    root = Path(args.path)
    prog = getattr(args, "prog_name", None) or "replay"
    try:
        cases = find_cases(root)
        if not cases:
            raise ConfigError(no_case_message(root))
        if options.device is not None:
            _check_device(options.device)
    except (FileNotFoundError, ConfigError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 2

    show_times = options.sync_time_measure or options.run_times > 1
    timer = "SyncExecuteTimer" if options.sync_time_measure else "ExecuteTimer"
    runs: Counter[str] = Counter()  # runs timed so far of the current case, by phase

    def on_time(op: str, phase: str, ms: float) -> None:
        runs[phase] += 1
        if show_times:
            note = f"run {runs[phase]} of {options.run_times}"
            if runs[phase] == 1:
                note += ", includes warm-up"
            console.print(f"{timer}: {op} {phase} elapsed {ms:.8f} ms ({note})", highlight=False)

    results: list[CaseResult] = []
    with Progress(console=console, transient=True, disable=show_times) as progress:
        task = progress.add_task("replaying", total=len(cases))
        for path in cases:
            runs.clear()
            result = replay_case(path, options, on_time)
            results.append(result)
            if show_times:
                _print_run_stats(console, timer, result)
            progress.advance(task)
    counts = Counter(r.status for r in results)
    console.print(_summary(results))
    if args.verbose or any(r.status != "PASS" for r in results):
        console.print(_table(results, args.verbose, root if root.is_dir() else root.parent))
    out_dir = _write_results(results, args.results_dir)
    bits = [b for r in results for b in (r.bitwise_forward, r.bitwise_backward) if b is not None]
    summary = ", ".join(f"{counts[s]} {s.lower()}" for s in ("PASS", "FAIL", "ERROR", "SKIP") if counts[s])
    console.print(f"replay: {len(results)} cases: {summary}; bitwise equal {sum(bits)}/{len(bits)} results; "
                  f"table in {out_dir}", highlight=False)
    return 1 if counts["FAIL"] or counts["ERROR"] else 0


#: What a replay reads, for messages about a path that holds none.
NO_CASE_HINT = "expected a folder written by OpCapture, e.g. op_tools_results/op_capture/<run>"


def no_case_message(root: Path) -> str:
    """The one line for a path that holds no captured case (a file that is no case file, a foreign folder)."""
    if root.is_file():
        return f"{str(root)!r} is a file, not a folder of captured cases; {NO_CASE_HINT}"
    return f"{str(root)!r} holds no captured case (no cases: no case.json under it); {NO_CASE_HINT}"


def _check_device(device: str) -> None:
    """:class:`ConfigError` unless ``--device`` names a device of this process."""
    try:
        target = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {device!r}: PyTorch knows no such device in this process") from None
    if not _device_available(str(target)):
        raise ConfigError(f"--device {device!r}: this process has no such device")


def _set_up_device(device: str | None) -> str | None:
    """Make ``--device`` usable in this process; a message saying why it is not, else None.

    This command sets up no vendor adapter (``ditorch replay`` does, by importing ditorch). It imports
    torch_dipu, which registers the dipu device, only when asked to replay on dipu.
    """
    if device is None:
        return None
    if device.partition(":")[0] == "dipu":
        import torch_dipu  # noqa: F401  (registers the dipu device)
    try:
        torch.device(device)
    except RuntimeError:
        return (f"replay: PyTorch knows no device {device!r} in this process; `ditorch replay` sets up the "
                "vendor's device (or pass --device dipu, or --device cpu)")
    return None


def _unavailable_captured_device(root: Path) -> str | None:
    """The device a case under ``root`` was captured on when this process lacks it (unreadable cases are
    left to the replay, which reports them)."""
    try:
        cases = find_cases(root)
    except FileNotFoundError:
        return None
    for path in cases:
        try:
            device = str(json.loads((path / cf.CASE_FILE).read_text(encoding="utf-8")).get("device", "cpu"))
        except Exception:
            continue
        if not _device_available(device):
            return device
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m op_tools.run_op_from_data",
                                     description="Replay captured op cases on a device and compare the results. "
                                                 "Sets up no vendor device: use `ditorch replay` for that, or "
                                                 "--device dipu.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.prog_name = "run_op_from_data"
    problem = _set_up_device(args.device)
    if problem:
        print(f"run_op_from_data: error: {problem.removeprefix('replay: ')}", file=sys.stderr)
        return 2
    if args.device is None:
        missing = _unavailable_captured_device(Path(args.path))
        if missing:
            print(f"replay: cases were captured on {missing}, which this process does not have; replaying on the "
                  f"best available device instead. Pass --device {missing.partition(':')[0]}, or use "
                  "`ditorch replay`, which sets up the vendor's device.", file=sys.stderr)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
