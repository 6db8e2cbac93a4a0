"""The ``ditorch`` command line: one argparse subcommand per tool (``ditorch <command> --help``).

The parser is built lazily: ``ditorch --help`` and bare ``ditorch`` list the commands without importing torch,
and only the chosen command's options are set up (its modules imported). A command is one :class:`Command` in
:data:`COMMANDS` whose ``fill`` calls its module's ``add_arguments(parser)`` and sets its handler: the one way a
subcommand plugs in. ditorch's device is activated
(:func:`ditorch.activate`) after the command line has been read and checked, so a malformed option costs no
device set-up.

Errors and exit statuses (docs/cli.md):

- a user error (a malformed or unknown option value, a missing file, a malformed environment variable: argparse's
  errors, :class:`ditorch.arguments.Refused`, :class:`diopi.env.ConfigError`) is one line on stderr,
  ``ditorch <command>: error: <message>``, and exit status 2; ``DITORCH_DEBUG=1`` adds its traceback;
- an exception raised by the user's script (``run``, ``profile``, ``dump-modules``) keeps Python's behaviour: its
  traceback (from the script's frames on) and exit status 1;
- any other exception is a bug in ditorch: its traceback, a line saying so, exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ditorch import __version__
from ditorch.arguments import EXIT_USAGE, ArgumentParser, Refused, first_positional, int_at_least, positive_float, seed

#: Exit status of an internal error of ditorch (and of a script that raised, as with ``python script.py``).
EXIT_ERROR = 1
REPORT_URL = "https://github.com/DeepLink-org/ditorch/issues"


# -- handlers (imports deferred: the chosen command's modules only) ----------------------------------------------

def _demo(args: argparse.Namespace) -> int:
    from ditorch import demo

    if args.list_models:
        return demo.list_models()
    return demo.run(steps=args.steps, device=args.device, seed=args.seed, lr=args.lr, autocompare=args.autocompare,
                    fault=args.fault, results_dir=args.results_dir, model=args.model)


def _info(args: argparse.Namespace) -> int:
    if args.probe:
        from ditorch import probe

        return probe.run(args.json)
    from ditorch import info

    return info.run()


def _generate(args: argparse.Namespace) -> int:
    from ditorch import generate

    return generate.run(args.model, args.prompt or [], max_new_tokens=args.max_new_tokens, use_dlinfer=args.dlinfer,
                        device=args.device, dtype=args.dtype, block_size=args.block_size)


def _conformance(args: argparse.Namespace) -> int:
    if getattr(args, "conformance_command", None) is None:
        raise Refused("no conformance command given (choose from count, gen, run, from-capture)")
    from diopi.conformance import cli as conformance

    return conformance.handle(args, prog="ditorch conformance")


# -- checks before any work (no torch: a missing file answers at once) --------------------------------------------

def _need_path(value: str | None, what: str, kind: str = "any") -> None:
    """:class:`Refused` unless ``value`` (when given) exists, as a file or folder when ``kind`` says so."""
    if value is None:
        return
    if not os.path.exists(value):
        raise Refused(f"{what} {value!r}: no such file or directory")
    if kind == "dir" and not os.path.isdir(value):
        raise Refused(f"{what} {value!r}: not a folder")
    if kind == "file" and not os.path.isfile(value):
        raise Refused(f"{what} {value!r}: not a file")


def _writable_file(value: str | None, what: str) -> None:
    """:class:`Refused` when ``value`` (a file to write) is a folder or its folder does not exist."""
    if value is None:
        return
    if os.path.isdir(value):
        raise Refused(f"{what} {value!r}: is a folder, expected a file path to write")
    parent = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(parent):
        raise Refused(f"{what} {value!r}: the folder {parent} does not exist")


def _not_a_file(value: str | None, what: str) -> None:
    """:class:`Refused` when ``value`` (a folder to create or fill) is an existing file."""
    if value is not None and os.path.isfile(value):
        raise Refused(f"{what} {value!r}: is a file, expected a folder")


def _check_info(args: argparse.Namespace) -> None:
    if args.json is not None and not args.probe:
        raise Refused("--json is the probe's output: use it with --probe")
    _writable_file(args.json, "--json")


def _check_demo(args: argparse.Namespace) -> None:
    _not_a_file(args.results_dir, "--results-dir")


def _check_generate(args: argparse.Namespace) -> None:
    from ditorch.models import FAMILIES, generate_model_problem

    problem = generate_model_problem(args.model)
    if problem is not None:
        raise Refused(problem)
    if args.model in FAMILIES and any(not p for p in args.prompt):
        raise Refused("--prompt: an empty prompt has no token to start from")


def _check_script(args: argparse.Namespace) -> None:
    """:class:`Refused` unless the script to run (SCRIPT, or the remainder after the options) is a file."""
    from ditorch.run import script_command, script_problem

    command = (([args.script] if args.script is not None else []) if hasattr(args, "script")  # dump-modules, parity
               else script_command(args))  # run, profile: the remainder after the options
    problem = script_problem(command, args.command_name)
    if problem is not None:
        raise Refused(problem)


def _check_profile(args: argparse.Namespace) -> None:
    _check_script(args)
    if args.out is not None and os.path.isdir(args.out):
        raise Refused(f"--out {args.out!r}: is a folder, expected the trace's file path")


#: The files that make a folder a captured case (op_tools' case.json; upstream op_tools' input.pth/output.pth).
CASE_FILES = ("case.json", "input.pth", "output.pth")
NO_CASE_HINT = "expected a folder written by OpCapture, e.g. op_tools_results/op_capture/<run>"


def _holds_a_case(folder: str) -> bool:
    """Whether any folder under ``folder`` holds a captured case (stops at the first)."""
    return any(name in CASE_FILES for _, _, files in os.walk(folder) for name in files)


def _check_replay(args: argparse.Namespace) -> None:
    path = args.path
    _need_path(path, "DIR")
    if os.path.isfile(path) and os.path.basename(path) not in CASE_FILES:
        raise Refused(f"{path!r} is a file, not a folder of captured cases; {NO_CASE_HINT}")
    if os.path.isdir(path) and not _holds_a_case(path):
        raise Refused(f"{path!r} holds no captured case (no cases: no case.json under it); {NO_CASE_HINT}")
    _not_a_file(args.results_dir, "--results-dir")


def _check_report(args: argparse.Namespace) -> None:
    _need_path(args.path, "DIR")


def _check_dump_modules(args: argparse.Namespace) -> None:
    _check_script(args)
    _need_path(args.fixed_input, "--fixed-input", "dir")
    _not_a_file(args.out, "--out")


def _check_compare_runs(args: argparse.Namespace) -> None:
    _need_path(args.ref, "REF", "dir")
    _need_path(args.test, "TEST", "dir")
    _need_path(args.fp64, "--fp64", "dir")
    _writable_file(args.json, "--json")
    _writable_file(args.html, "--html")


def _check_parity(args: argparse.Namespace) -> None:
    _check_script(args)
    _need_path(args.reference, "--reference", "dir")
    _not_a_file(args.out, "--out")
    if args.fixed_input and args.stats_only and args.reference is None:
        raise Refused("--fixed-input replays the reference run's inputs and needs full dumps; drop --stats-only")


def _check_conformance(args: argparse.Namespace) -> None:
    command = getattr(args, "conformance_command", None)
    if command == "from-capture":
        _need_path(args.capture_dir, "CAPTURE_DIR", "dir")
        _not_a_file(args.out_dir, "OUT_DIR")
        return
    if command == "run":  # a missing --data is the suite's to explain (it says to run gen first)
        _not_a_file(args.data, "--data")
        _need_path(args.device_config, "--device-config", "file")
        for option in ("csv", "junit", "html"):
            _writable_file(getattr(args, option), f"--{option}")
    elif command == "gen":
        _not_a_file(args.data, "--data")


# -- the subcommands ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """One subcommand: its one-line help, and how to fill its parser (called only when it is chosen)."""

    name: str
    help: str
    fill: Callable[[argparse.ArgumentParser], None]


def _plugged(module: str, handler: str, description: str, usage: str | None = None,
             **defaults: Any) -> Callable[[argparse.ArgumentParser], None]:
    """The ``fill`` of a command whose module plugs in with ``add_arguments(parser)`` and a ``handler`` function;
    ``defaults`` (``check``, ``script_runs``, ``prog_name``) go to the parser."""

    def fill(p: argparse.ArgumentParser) -> None:
        plugged = importlib.import_module(module)
        p.description = description
        if usage is not None:
            p.usage = usage
        plugged.add_arguments(p)
        p.set_defaults(handler=getattr(plugged, handler), **defaults)

    return fill


def _fill_demo(p: argparse.ArgumentParser) -> None:
    from ditorch.models import DEFAULT_LR, DEFAULT_MODEL, DEFAULT_SEED, DEFAULT_STEPS, FAMILIES

    p.description = ("Train a tiny model of one of the seeds' families (2 layers, hidden 128, random weights: nothing "
                     "is downloaded) on synthetic data for a few steps on the best available device: a native "
                     "accelerator if PyTorch has one, else dipu.")
    p.add_argument("--model", metavar="NAME", default=DEFAULT_MODEL, choices=tuple(FAMILIES),
                   help=f"model family: {', '.join(FAMILIES)} (default {DEFAULT_MODEL}; --list-models says what "
                        f"each exercises)")
    p.add_argument("--list-models", action="store_true", help="list the model families and exit")
    p.add_argument("--steps", type=int_at_least(0), default=DEFAULT_STEPS, help=f"training steps (default "
                                                                                  f"{DEFAULT_STEPS})")
    p.add_argument("--device", default=None,
                   help="device to use instead of the best available one (cpu, dipu, dipu:1, ...)")
    p.add_argument("--seed", type=seed, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    p.add_argument("--lr", type=positive_float, default=DEFAULT_LR,
                   help=f"AdamW learning rate, a finite number > 0 (default {DEFAULT_LR:g})")
    p.add_argument("--autocompare", action="store_true",
                   help="train under op_tools.OpAutoCompare: every operator call on the device is checked against "
                        "the CPU; prints the counts and the path of report.html")
    p.add_argument("--fault", metavar="OP:KIND[:PARAM]", default=None,
                   help="rehearse a debugging session on droplet's dipu: inject this fault (DROPLET_FAULTS syntax, "
                        "e.g. mm:bias:0.5) for the run, check with --autocompare and print the op it named first; "
                        "exit status 0 when a FAIL was found, 1 when none")
    p.add_argument("--results-dir", metavar="DIR", default=None,
                   help="where --autocompare writes (default $OP_TOOLS_RESULTS_DIR or op_tools_results)")
    p.set_defaults(handler=_demo, check=_check_demo)


def _fill_generate(p: argparse.ArgumentParser) -> None:
    from ditorch.models import FAMILIES

    p.description = ("Generate greedily from one or more prompts (one left-padded batch) with a tiny model family "
                     "(random weights; prompt bytes are the token ids, output shown as ids and a byte-level "
                     "decode) or a local Hugging Face model directory (nothing downloaded). Prints the generated "
                     "ids and text per prompt, tokens/s and, with --dlinfer, the dlinfer op counts (docs/dlinfer.md).")
    p.add_argument("--model", metavar="NAME", required=True,
                   help=f"a tiny text family ({', '.join(n for n, f in FAMILIES.items() if not f.image_tokens)}) "
                        f"or a local Hugging Face model directory")
    p.add_argument("--prompt", metavar="TEXT", action="append", required=True,
                   help="a prompt (repeat for a batch)")
    p.add_argument("--max-new-tokens", type=int_at_least(1), default=16, help="tokens to generate (default 16)")
    p.add_argument("--dlinfer", action="store_true",
                   help="run on dlinfer's ops (dlinfer.framework.transformers.install: paged KV cache)")
    p.add_argument("--device", default=None, help="cpu (default), dipu, dipu:1, ...")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="default float32")
    p.add_argument("--block-size", type=int_at_least(1), default=16,
                   help="KV cache block size with --dlinfer (default 16)")
    p.set_defaults(handler=_generate, check=_check_generate)


def _fill_info(p: argparse.ArgumentParser) -> None:
    p.description = ("Show what `import ditorch` found: framework and version, devices and memory, adapters "
                     "found/failed/not installed, DITORCH_* switches in force. With --probe: run every mapped "
                     "torch.cuda name and a few CUDA idioms on the device and print one row per check (native, "
                     "derived, unsupported, wrong; docs/ditorch.md); exit status 1 when a row is wrong, 2 with no "
                     "device to probe.")
    p.add_argument("--probe", action="store_true",
                   help="run every mapped torch.cuda name and CUDA idiom on the device and check the answers")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="with --probe: where to write the JSON copy of the table (default ditorch_probe.json)")
    p.set_defaults(handler=_info, check=_check_info)


def _fill_conformance(p: argparse.ArgumentParser) -> None:
    from diopi.conformance import cli as conformance
    from op_tools import conformance_cases

    p.description = ("Same as `python -m diopi.conformance`: count the cases, generate their reference data on the "
                     "CPU, and judge a DIOPI implementation or a torch device on them (docs/conformance.md).")
    subcommands = conformance.add_arguments(p)
    p.set_defaults(handler=_conformance, check=_check_conformance)
    sub = subcommands.add_parser("from-capture", help="turn OpCapture output into conformance cases of the DIOPI "
                                                      "functions the captured calls make (model cases)")
    conformance_cases.add_arguments(sub)
    sub.set_defaults(handler=conformance_cases.run)


_fill_run = _plugged(
    "ditorch.run", "handle",
    ("Import ditorch (vendor adapter and cuda mocking), then run the script as __main__ with its own "
     "arguments, as `python script.py args` would. Options before '--' are ditorch's (they switch "
     "op_tools' checking tools on for the whole script); the script's exit status and exceptions "
     "propagate."),
    usage="%(prog)s [options] -- script.py [args ...]",
    check=_check_script, script_runs=True)

_fill_profile = _plugged(
    "ditorch.profiling", "handle",
    ("Run the script as `ditorch run` does, under torch.profiler (CPU activities), with op_tools' "
     "engine active so every API call (torch.nn.functional.linear, ...) is a named range and dipu "
     "kernels appear under their DIOPI names. Then write the trace (Chrome/Perfetto JSON) and print "
     "the summary table and the trace's path to stderr. The script's exit status propagates."),
    usage="%(prog)s [options] -- script.py [args ...]",
    check=_check_profile, script_runs=True)

_fill_replay = _plugged(
    "op_tools.run_op_from_data", "run",
    ("Rebuild every case under DIR (an OpCapture run folder, searched recursively) on a device with "
     "its recorded layout, run it forward and backward, and compare with what was captured (bitwise "
     "and by the comparison rules), with the vendor's device set up by `import ditorch`. Same as "
     "`python -m op_tools.run_op_from_data`, which sets up no vendor device. Exit status 1 if any "
     "case failed or could not be replayed, 2 when DIR holds no captured case."),
    check=_check_replay, prog_name="ditorch replay")

_fill_report = _plugged(
    "op_tools.report", "run",
    ("Find every results.jsonl under DIR (a run folder, or any folder above run folders) and write "
     "a self-contained report.html next to each; print each path written. Exit status 2 when DIR "
     "holds no results.jsonl or one cannot be read."),
    check=_check_report, prog_name="ditorch report")

_fill_dump_modules = _plugged(
    "module_tools.dump_command", "handle",
    ("Run the script as `ditorch run` does, with a ModuleDump of its model (the first module with "
     "parameters called at the outermost level): inputs, outputs, parameters and their gradients of "
     "every module call, full tensors or statistics (docs/module_tools.md)."),
    usage=("%(prog)s [--out DIR] [--stats-only] [--steps S] [--stop-after N] [--fixed-input REF_DUMP] -- "
           "script.py [args ...]"),
    check=_check_dump_modules, script_runs=True)

_fill_compare_runs = _plugged(
    "module_tools.compare_command", "handle",
    ("Align two ModuleDump runs module by module (wrappers such as DDP's `module.` stripped), judge "
     "every tensor with diopi.compare and print the first divergence in forward and in backward "
     "order; exit 0 without divergence, 1 with one, 2 on a bad dump (docs/module_tools.md)."),
    check=_check_compare_runs)

_fill_parity = _plugged(
    "module_tools.parity_command", "handle",
    ("Run the unmodified script twice with the same seeds, on the CPU (cuda mapped to the CPU) and on "
     "the device (random calls drawn from the CPU generator), dump both for N steps with ModuleDump "
     "and print 'no divergence in N steps' or the first divergent module; exit 0 none, 1 divergence, "
     "2 a run failed or nothing aligns (docs/module_tools.md)."),
    usage=("%(prog)s [--steps N] [--out DIR] [--stats-only] [--reference DIR] [--fixed-input] -- script.py "
           "[args ...]"),
    check=_check_parity)


COMMANDS: tuple[Command, ...] = (
    Command("demo", "train a tiny model (Llama, Qwen, InternVL, DeepSeek-V3, ...) for a few steps on the best device",
            _fill_demo),
    Command("generate", "greedy generation with a tiny model family or a local HF model, stock or on dlinfer's ops",
            _fill_generate),
    Command("info", "show the framework, devices, adapters and DITORCH_* switches", _fill_info),
    Command("run", "run an unmodified (CUDA-style) script with ditorch active", _fill_run),
    Command("profile", "run an unmodified script under torch.profiler; write a Chrome/Perfetto trace, print a summary",
            _fill_profile),
    Command("replay", "replay captured op cases (from op_tools.OpCapture) and compare with the captured results",
            _fill_replay),
    Command("report", "rebuild the HTML report (report.html) of checking-tool runs from their results.jsonl",
            _fill_report),
    Command("dump-modules", "run an unmodified script and dump every module call of its model "
                            "(module_tools.ModuleDump)", _fill_dump_modules),
    Command("compare-runs", "compare two module dumps and name the first module where they part, forward and "
                            "backward", _fill_compare_runs),
    Command("parity", "does the script train the same on this device? run it on the CPU and on the device, compare "
                      "modules", _fill_parity),
    Command("conformance", "the DIOPI conformance suite: count, gen (reference data), run (--impl VENDOR | --device "
                           "DEV), from-capture", _fill_conformance),
)
#: The subcommands' names (``python -m ditorch`` tells a command from a script by them).
COMMAND_NAMES: tuple[str, ...] = tuple(c.name for c in COMMANDS)
ALL = "*"


def build_parser(fill: str | None = ALL) -> argparse.ArgumentParser:
    """The ``ditorch`` parser. ``fill``: which subcommand's options to set up (importing its modules): every one
    (:data:`ALL`, the default), one name, or None (only the list of commands: no torch)."""
    parser = ArgumentParser(
        prog="ditorch",
        description="ditorch: run PyTorch models on any device (native accelerators or the dipu device).",
        epilog="Errors are one line on stderr and exit status 2 (DITORCH_DEBUG=1: with the traceback); "
               "`ditorch <command> --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    for command in COMMANDS:
        p = commands.add_parser(command.name, help=command.help, description=command.help)
        p.set_defaults(command_name=command.name)
        if fill == ALL or fill == command.name:
            command.fill(p)
    return parser


# -- running a command -------------------------------------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _is_config_error(exc: BaseException) -> bool:
    """A :class:`diopi.env.ConfigError` (looked up only if diopi.env was imported: nothing else raises one)."""
    env = sys.modules.get("diopi.env")
    return isinstance(exc, Refused) or (env is not None and isinstance(exc, env.ConfigError))


def _debug() -> bool:
    """``DITORCH_DEBUG`` for an error being reported (read leniently: its own malformed value is reported apart;
    unset, nothing is imported)."""
    if not os.environ.get("DITORCH_DEBUG", "").strip():
        return False
    try:
        from ditorch.config import DitorchConfig

        return DitorchConfig.from_env({"DITORCH_DEBUG": os.environ.get("DITORCH_DEBUG", "0")}).debug
    except ValueError:
        return False


def guarded(prog: str, call: Callable[[], int]) -> int:
    """Run ``call`` (a command's work) and turn what it raises into the exit status (see the module docstring)."""
    try:
        return call()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001  (every exception ends the command: report it the way it deserves)
        if _is_config_error(exc):
            if _debug():
                traceback.print_exc()
            print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr, flush=True)
            return EXIT_USAGE
        from ditorch.run import print_script_exception

        if print_script_exception(exc):  # the user's script raised: Python's own report of it
            return EXIT_ERROR
        traceback.print_exc()
        print(f"{prog}: internal error: {type(exc).__name__} in ditorch itself (not in your input or script); "
              f"please report it with the traceback above at {REPORT_URL}", file=sys.stderr, flush=True)
        return EXIT_ERROR


def _execute(args: argparse.Namespace) -> int:
    check = getattr(args, "check", None)
    if check is not None:
        check(args)  # cheap checks first: a missing file answers before torch is imported
    import ditorch
    from ditorch.config import DitorchConfig

    DitorchConfig.from_env()  # every DITORCH_* value, checked before any work
    ditorch.activate()
    return args.handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    """``ditorch [command] ...``: the exit status (0 success; 1 a failed check, a script that raised, or an internal
    error; 2 a user error, printed as one line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = first_positional(argv)
    parser = build_parser(chosen if chosen in COMMAND_NAMES else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed as one line
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    if getattr(args, "handler", None) is None:  # no command: bare ``ditorch``, or options only
        parser.print_help()
        print("ditorch: error: no command given (ditorch <command> --help)", file=sys.stderr, flush=True)
        return EXIT_USAGE
    prog = " ".join(["ditorch", args.command_name, *filter(None, [getattr(args, "conformance_command", None)])])
    return guarded(prog, lambda: _execute(args))


def run_script_command(script_argv: Sequence[str]) -> int:
    """``python -m ditorch script.py args``: run the script as ``ditorch run -- script.py args`` does."""
    from ditorch import run

    return guarded("ditorch", lambda: run.run_script(script_argv[0], script_argv[1:]))
