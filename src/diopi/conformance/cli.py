"""The conformance command line: ``python -m diopi.conformance count|gen|run`` (also ``ditorch conformance``).

Exit status: 0 when every case passed (or was skipped / not implemented), 1 when a case failed or could not be
used (FAIL, ERROR; for ``gen``: a case whose reference could not be computed), 2 for bad input (an unknown
function pattern, vendor or device, a malformed config, missing reference data).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from diopi.conformance.cases import ConfigError
from diopi.conformance.device_config import DeviceConfig, DeviceConfigError, load_device_config
from diopi.conformance.gen import FROM_CAPTURE_INDEX, GenResult, gen_function
from diopi.conformance.run import CaseResult, TargetError, device_reachability, make_target, run_case
from diopi.conformance.suite import Suite, family_of, load_suite
from diopi.env import ConfigError as EnvConfigError

DEFAULT_DATA = "diopi_conformance_data"


class UsageError(ValueError):
    """Bad input the user must fix: printed as one line, exit status 2."""


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N (e.g. 1/4), got {text!r}") from None
    if not (n >= 1 and 1 <= i <= n):
        raise argparse.ArgumentTypeError(f"expected I/N with 1 <= I <= N, got {text!r}")
    return i, n


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The subcommands, on ``parser`` (``python -m diopi.conformance`` or ``ditorch conformance``, which adds
    ``from-capture`` to the returned subcommands)."""
    commands = parser.add_subparsers(dest="conformance_command", metavar="<command>")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--functions", metavar="REGEX", default=None,
                       help="only the DIOPI functions whose whole name matches (comma-separated entries)")
        p.add_argument("--data", metavar="DIR", default=DEFAULT_DATA,
                       help=f"reference data folder (default {DEFAULT_DATA})")

    def work(p: argparse.ArgumentParser) -> None:
        p.add_argument("--shard", metavar="I/N", type=_shard, default=None,
                       help="run only the I-th of N interleaved parts (1-based): shards together cover every case "
                            "exactly once (gen shards by function)")
        p.add_argument("--workers", metavar="N", type=_positive, default=1,
                       help="worker processes (spawned; default 1: in this process)")
        p.add_argument("--verbose", action="store_true", help="the summary lists every function")

    p = commands.add_parser("count", help="print the number of functions and cases, by family")
    common(p)
    p.add_argument("--device", metavar="DEV", default=None,
                   help="also count the functions whose calls reach DEV's kernels (asks the plug-in, e.g. torch_dipu)")
    p = commands.add_parser("gen", help="compute the reference data of every case on the CPU")
    common(p)
    work(p)
    p = commands.add_parser("run", help="judge an implementation (--impl) or a torch device (--device)")
    common(p)
    work(p)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--impl", metavar="NAME", help="a DIOPI implementation (entry point group diopi.impls)")
    target.add_argument("--device", metavar="DEV", help="a torch device: cpu, dipu, cuda, npu, ...")
    p.add_argument("--impl-option", metavar="KEY=VALUE", type=_option, action="append", default=[],
                   help="an option for the implementation's factory (droplet: faults=mul.Tensor:bias)")
    p.add_argument("--device-config", metavar="FILE", default=None,
                   help="YAML: skips (with reasons) and tolerance overrides for this target")
    p.add_argument("--csv", metavar="FILE", default=None, help="write one row per case")
    p.add_argument("--junit", metavar="FILE", default=None, help="write JUnit XML (one testcase per case)")
    p.add_argument("--html", metavar="FILE", default=None, help="write a self-contained HTML report")
    return commands


def _selected(suite: Suite, pattern: str | None) -> list[str]:
    try:
        return suite.select(pattern)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _stored(data: Path, function: str) -> list[Path]:
    root = data / function
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def _count(args: argparse.Namespace, suite: Suite, out: Callable[[str], None]) -> int:
    data = Path(args.data)
    by_family: Counter[str] = Counter()
    functions_by_family: Counter[str] = Counter()
    estimated = 0
    for function in _selected(suite, args.functions):
        cases, recipes = suite.expand(function)
        n = len(cases)
        if recipes:
            stored = len(_stored(data, function))
            if stored > len(cases):
                n = stored
            else:
                n += len(recipes)
                estimated += 1
        family = family_of(function)
        by_family[family] += n
        functions_by_family[family] += 1
    total = sum(by_family.values())
    note = (f" (estimated: {estimated} functions whose cases are recorded by gen have no data in {data} yet)"
            if estimated else "")
    out(f"{sum(functions_by_family.values())} functions, {total} cases{note}")
    for family, n in by_family.items():
        out(f"  {family:<12} {functions_by_family[family]:>4} functions {n:>6} cases")
    if not args.functions:
        import diopi

        without = [f.name for f in diopi.functions() if f.name not in suite.configs]
        if without:
            out(f"{len(without)} functions of the DIOPI table have no configs: {', '.join(without[:10])}"
                + (", ..." if len(without) > 10 else ""))
    if getattr(args, "device", None):
        _count_reachable(args.device, _selected(suite, args.functions), out)
    return 0


def _count_reachable(device: str, functions: list[str], out: Callable[[str], None]) -> None:
    reach = device_reachability(device)
    if reach is None:
        out(f"{device}: its plug-in cannot tell which functions reach its kernels (run --device {device} proves it "
            f"case by case where the plug-in counts its kernel calls)")
        return
    missing = [(f, reach.get(f) or "unknown to the plug-in") for f in functions if f not in reach or reach[f]]
    out(f"{len(functions) - len(missing)} of {len(functions)} functions reach {device}'s kernels")
    for function, why in missing:
        out(f"  unreachable on {device}: {function}: {why}")


def _progress(total: int, label: str) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True,
                    disable=not sys.stderr.isatty(), console=Console(stderr=True))


def _pool(workers: int, initializer: Callable[..., None] | None = None,
          initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=initializer, initargs=initargs)


def _gen_one(data: str, function: str, configs: dict[str, list[Any]]) -> GenResult:
    suite = Suite(configs=configs)
    cases, recipes = suite.expand(function)
    return gen_function(Path(data), function, cases, recipes)


def _gen(args: argparse.Namespace, suite: Suite, out: Callable[[str], None]) -> int:
    functions = _selected(suite, args.functions)
    if args.shard:
        i, n = args.shard
        functions = functions[i - 1::n]
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    results: list[GenResult] = []
    with _progress(len(functions), "gen") as progress:
        task = progress.add_task("gen", total=len(functions))
        if args.workers == 1:
            for function in functions:
                cases, recipes = suite.expand(function)
                results.append(gen_function(data, function, cases, recipes))
                progress.advance(task)
        else:
            with _pool(args.workers) as pool:
                futures = [pool.submit(_gen_one, str(data), f, suite.configs) for f in functions]
                for future in futures:
                    results.append(future.result())
                    progress.advance(task)
    errors = [e for r in results for e in r.errors]
    for r in results:  # a few lines per function: one config mistake often spoils many cases
        for case_id, message in r.errors[:3]:
            out(f"ERROR {case_id}: {message}")
        if len(r.errors) > 3:
            out(f"ERROR ... and {len(r.errors) - 3} more cases of {r.function}")
    out(f"wrote {sum(r.written for r in results)} cases of {len(results)} functions to {data}"
        + (f"; {len(errors)} could not be generated (fix their configs)" if errors else ""))
    return 1 if errors else 0


def _case_list(suite: Suite, functions: list[str], data: Path) -> tuple[list[Path], list[CaseResult]]:
    """Case folders to run, in suite order, and ERROR results for cases whose data is missing."""
    paths: list[Path] = []
    missing: list[CaseResult] = []
    hint = f"run `python -m diopi.conformance gen --data {data}` first"
    hint_gen = f"{hint} (gen names the cases whose reference it cannot compute)"
    if (data / FROM_CAPTURE_INDEX).is_file():  # model cases: whatever was stored, per selected function
        return [p for function in functions for p in _stored(data, function)], missing
    for function in functions:
        cases, recipes = suite.expand(function)
        stored = {p.name: p for p in _stored(data, function)}
        expected = [c.id.rsplit("/", 1)[1] for c in cases]
        for name in expected:
            if name in stored:
                paths.append(stored[name])
            else:
                missing.append(CaseResult(f"{function}/{name}", function, "ERROR",
                                          f"no reference data for case {function}/{name} in {data}: {hint_gen}"))
        extra = [stored[n] for n in sorted(stored) if n not in set(expected)]
        if recipes and not extra:
            missing.append(CaseResult(f"{function}/*", function, "ERROR",
                                      f"no reference data for the recorded cases of {function} in {data}: {hint}"))
        paths.extend(extra if recipes else [])
    return paths, missing


_WORKER: dict[str, Any] = {}


def _init_worker(impl: str | None, device: str | None, options: dict[str, str], config_path: str | None) -> None:
    _WORKER["target"] = make_target(impl, device, options)
    _WORKER["config"] = load_device_config(config_path) if config_path else None


def _run_chunk(paths: list[str]) -> list[CaseResult]:
    return [run_case(Path(p), _WORKER["target"], _WORKER["config"]) for p in paths]


def _run(args: argparse.Namespace, suite: Suite, out: Callable[[str], None]) -> int:
    from diopi.conformance import report

    functions = _selected(suite, args.functions)
    data = Path(args.data)
    device_config: DeviceConfig | None = load_device_config(args.device_config) if args.device_config else None
    options = dict(args.impl_option)
    target = make_target(args.impl, args.device, options)
    paths, missing = _case_list(suite, functions, data)
    if not paths:
        first = missing[0].detail if missing else f"no cases in {data}"
        raise UsageError(first)
    work: list[Path | CaseResult] = [*paths, *missing]
    if args.shard:
        i, n = args.shard
        work = work[i - 1::n]
    todo = [w for w in work if isinstance(w, Path)]
    results: list[CaseResult] = [w for w in work if isinstance(w, CaseResult)]
    with _progress(len(todo), "run") as progress:
        task = progress.add_task("run", total=len(todo))
        if args.workers == 1:
            for path in todo:
                results.append(run_case(path, target, device_config))
                progress.advance(task)
        else:
            with _pool(args.workers, _init_worker, (args.impl, args.device, options, args.device_config)) as pool:
                for chunk in pool.map(_run_chunk, [[str(p) for p in todo[i:i + 16]] for i in range(0, len(todo), 16)]):
                    results.extend(chunk)
                    progress.advance(task, len(chunk))
    if hasattr(target, "close"):
        target.close()
    order = {f: i for i, f in enumerate(functions)}
    results.sort(key=lambda r: (order.get(r.function, len(order)), r.case))
    title = f"DIOPI conformance: {target.name}"
    if args.csv:
        report.write_csv(args.csv, results)
    if args.junit:
        report.write_junit(args.junit, results)
    if args.html:
        report.write_html(args.html, results, title)
    for r in results:
        if r.outcome in ("FAIL", "ERROR"):
            out(f"{r.outcome} {r.case} ({r.op or r.function}, {r.dtype or '-'}, {r.layout or '-'}): {r.detail}"[:400])
    for line in report.summary_lines(results, args.verbose):
        out(line)
    failed = any(r.outcome in ("FAIL", "ERROR") for r in results)
    for function in unreached(results):
        out(f"UNREACHED {function}: none of its cases ran the device's kernel for it (the call decomposed before "
            f"the device or fell back to the CPU)")
        failed = True
    return 1 if failed else 0


def unreached(results: list[CaseResult]) -> list[str]:
    """Functions none of whose cases reached the device's kernel (only where the device counts its kernels)."""
    reached: dict[str, bool] = {}
    for r in results:
        if r.reached:
            reached[r.function] = reached.get(r.function, False) or r.reached == "yes"
    return [f for f, ok in reached.items() if not ok]


def handle(args: argparse.Namespace, extra: Iterable[Any] = (), prog: str = "diopi.conformance") -> int:
    """Run the parsed subcommand; bad input is one line on stderr (``<prog> <command>: error: ...``) and exit
    status 2."""
    command = getattr(args, "conformance_command", None)
    if command is None:
        print(f"{prog}: error: no command given (choose from count, gen, run)", file=sys.stderr)
        return 2
    try:
        suite = load_suite(extra=extra)
        handler = {"count": _count, "gen": _gen, "run": _run}[command]
        return handler(args, suite, print)
    except (UsageError, ConfigError, DeviceConfigError, TargetError, EnvConfigError) as exc:
        print(f"{prog} {command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diopi.conformance",
                                     description="The DIOPI conformance suite: count, gen (reference data on the "
                                                 "CPU) and run (judge an implementation or a torch device).")
    add_arguments(parser)
    return handle(parser.parse_args(argv))
