"""The ``ditorch`` command line: one argparse subcommand per tool (``ditorch <command> --help``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ditorch import __version__
from op_tools.config import int_at_least


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
    if args.json is not None:
        print("ditorch info: error: --json is the probe's output: use it with --probe", file=sys.stderr)
        return 2
    from ditorch import info

    return info.run()


def _generate(args: argparse.Namespace) -> int:
    from ditorch import generate

    return generate.run(args.model, args.prompt or [], max_new_tokens=args.max_new_tokens, use_dlinfer=args.dlinfer,
                        device=args.device, dtype=args.dtype, block_size=args.block_size)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ditorch",
        description="ditorch: run PyTorch models on any device (native accelerators or the dipu device).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")

    from ditorch import demo  # light: transformers is imported only when the demo runs
    from ditorch.models import FAMILIES

    p = commands.add_parser(
        "demo",
        help="train a tiny model (Llama, Qwen, InternVL, DeepSeek-V3, ...) for a few steps on the best device",
        description="Train a tiny model of one of the seeds' families (2 layers, hidden 128, random weights: nothing "
                    "is downloaded) on synthetic data for a few steps on the best available device: a native "
                    "accelerator if PyTorch has one, else dipu.",
    )
    p.add_argument("--model", metavar="NAME", default=demo.DEFAULT_MODEL,
                   help=f"model family: {', '.join(FAMILIES)} (default {demo.DEFAULT_MODEL}; --list-models says what "
                        f"each exercises)")
    p.add_argument("--list-models", action="store_true", help="list the model families and exit")
    p.add_argument("--steps", type=int_at_least(0), default=demo.DEFAULT_STEPS,
                   help=f"training steps (default {demo.DEFAULT_STEPS})")
    p.add_argument("--device", default=None,
                   help="device to use instead of the best available one (cpu, dipu, dipu:1, ...)")
    p.add_argument("--seed", type=int, default=demo.DEFAULT_SEED, help=f"random seed (default {demo.DEFAULT_SEED})")
    p.add_argument("--lr", type=float, default=demo.DEFAULT_LR,
                   help=f"AdamW learning rate (default {demo.DEFAULT_LR:g})")
    p.add_argument("--autocompare", action="store_true",
                   help="train under op_tools.OpAutoCompare: every operator call on the device is checked against "
                        "the CPU; prints the counts and the path of report.html")
    p.add_argument("--fault", metavar="OP:KIND[:PARAM]", default=None,
                   help="rehearse a debugging session on droplet's dipu: inject this fault (DROPLET_FAULTS syntax, "
                        "e.g. mm:bias:0.5) for the run, check with --autocompare and print the op it named first; "
                        "exit status 0 when a FAIL was found, 1 when none")
    p.add_argument("--results-dir", metavar="DIR", default=None,
                   help="where --autocompare writes (default $OP_TOOLS_RESULTS_DIR or op_tools_results)")
    p.set_defaults(handler=_demo)

    p = commands.add_parser(
        "generate",
        help="greedy generation with a tiny model family or a local HF model, stock or on dlinfer's ops",
        description="Generate greedily from one or more prompts (one left-padded batch) with a tiny model family "
                    "(random weights; prompt bytes are the token ids, output shown as ids and a byte-level "
                    "decode) or a local Hugging Face model directory (nothing downloaded). Prints the generated "
                    "ids and text per prompt, tokens/s and, with --dlinfer, the dlinfer op counts (docs/dlinfer.md).",
    )
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
    p.add_argument("--block-size", type=int_at_least(1), default=16, help="KV cache block size with --dlinfer "
                                                                          "(default 16)")
    p.set_defaults(handler=_generate)

    p = commands.add_parser("info", help="show the framework, devices, adapters and DITORCH_* switches",
                            description="Show what `import ditorch` found: framework and version, devices and "
                                        "memory, adapters found/failed/not installed, DITORCH_* switches in force. "
                                        "With --probe: run every mapped torch.cuda name and a few CUDA idioms on "
                                        "the device and print one row per check (native, derived, unsupported, "
                                        "wrong; docs/ditorch.md); exit status 1 when a row is wrong, 2 with no "
                                        "device to probe.")
    p.add_argument("--probe", action="store_true",
                   help="run every mapped torch.cuda name and CUDA idiom on the device and check the answers")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="with --probe: where to write the JSON copy of the table (default ditorch_probe.json)")
    p.set_defaults(handler=_info)

    from ditorch import run as run_command

    p = commands.add_parser(
        "run",
        help="run an unmodified (CUDA-style) script with ditorch active",
        usage="%(prog)s [options] -- script.py [args ...]",
        description="Import ditorch (vendor adapter and cuda mocking), then run the script as __main__ with "
                    "its own arguments, as `python script.py args` would. Options before '--' are ditorch's (they "
                    "switch op_tools' checking tools on for the whole script); the script's exit status and "
                    "exceptions propagate.",
    )
    run_command.add_arguments(p)
    p.set_defaults(handler=run_command.handle)

    from ditorch import profiling

    p = commands.add_parser(
        "profile",
        help="run an unmodified script under torch.profiler; write a Chrome/Perfetto trace, print a summary",
        usage="%(prog)s [options] -- script.py [args ...]",
        description="Run the script as `ditorch run` does, under torch.profiler (CPU activities), with op_tools' "
                    "engine active so every API call (torch.nn.functional.linear, ...) is a named range and dipu "
                    "kernels appear under their DIOPI names. Then write the trace (Chrome/Perfetto JSON) and print "
                    "the summary table and the trace's path to stderr. The script's exit status propagates.",
    )
    profiling.add_arguments(p)
    p.set_defaults(handler=profiling.handle)

    p = commands.add_parser(
        "replay",
        help="replay captured op cases (from op_tools.OpCapture) and compare with the captured results",
        description="Rebuild every case under DIR (searched recursively) on a device with its recorded layout, "
                    "run it forward and backward, and compare with what was captured (bitwise and by the "
                    "comparison rules), with the vendor's device set up by `import ditorch`. Same as "
                    "`python -m op_tools.run_op_from_data`, which sets up no vendor device. Exit status 1 if any "
                    "case failed or could not be replayed.",
    )
    from op_tools import run_op_from_data

    run_op_from_data.add_arguments(p)
    p.set_defaults(handler=run_op_from_data.run)

    p = commands.add_parser(
        "report",
        help="rebuild the HTML report (report.html) of checking-tool runs from their results.jsonl",
        description="Find every results.jsonl under DIR (a run folder, or any folder above run folders) and "
                    "write a self-contained report.html next to each; print each path written. Exit status 2 "
                    "when DIR holds no results.jsonl or one cannot be read.",
    )
    from op_tools import report

    report.add_arguments(p)
    p.set_defaults(handler=report.run)

    from module_tools import compare_command, dump_command

    p = commands.add_parser(
        "dump-modules",
        help="run an unmodified script and dump every module call of its model (module_tools.ModuleDump)",
        usage="%(prog)s [--out DIR] [--stats-only] [--steps S] [--stop-after N] [--fixed-input REF_DUMP] -- "
              "script.py [args ...]",
        description="Run the script as `ditorch run` does, with a ModuleDump of its model (the first module with "
                    "parameters called at the outermost level): inputs, outputs, parameters and their gradients of "
                    "every module call, full tensors or statistics (docs/module_tools.md).",
    )
    dump_command.parser(p)
    p.set_defaults(handler=dump_command.handle)

    p = commands.add_parser(
        "compare-runs",
        help="compare two module dumps and name the first module where they part, forward and backward",
        description="Align two ModuleDump runs module by module (wrappers such as DDP's `module.` stripped), judge "
                    "every tensor with diopi.compare and print the first divergence in forward and in backward "
                    "order; exit 0 without divergence, 1 with one, 2 on a bad dump (docs/module_tools.md).",
    )
    compare_command.build_parser(p)
    p.set_defaults(handler=compare_command.handle)

    from module_tools import parity_command

    p = commands.add_parser(
        "parity",
        help="does the script train the same on this device? run it on the CPU and on the device, compare modules",
        usage="%(prog)s [--steps N] [--out DIR] [--stats-only] [--reference DIR] [--fixed-input] -- script.py "
              "[args ...]",
        description="Run the unmodified script twice with the same seeds, on the CPU (cuda mapped to the CPU) and "
                    "on the device (random calls drawn from the CPU generator), dump both for N steps with "
                    "ModuleDump and print 'no divergence in N steps' or the first divergent module; exit 0 none, "
                    "1 divergence, 2 a run failed or nothing aligns (docs/module_tools.md).",
    )
    parity_command.parser(p)
    p.set_defaults(handler=parity_command.handle)

    from diopi.conformance import cli as conformance

    p = commands.add_parser(
        "conformance",
        help="the DIOPI conformance suite: count, gen (reference data), run (--impl VENDOR | --device DEV)",
        description="Same as `python -m diopi.conformance`: count the cases, generate their reference data on the "
                    "CPU, and judge a DIOPI implementation or a torch device on them (docs/conformance.md).",
    )
    subcommands = conformance.add_arguments(p)
    p.set_defaults(handler=conformance.handle)
    from op_tools import conformance_cases

    p = subcommands.add_parser("from-capture", help="turn OpCapture output into conformance cases of the DIOPI "
                                                    "functions the captured calls make (model cases)")
    conformance_cases.add_arguments(p)
    p.set_defaults(handler=conformance_cases.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 0
    return args.handler(args)
