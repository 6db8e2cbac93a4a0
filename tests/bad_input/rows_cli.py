"""Bad-input rows: the ``ditorch`` command line (one line on stderr, exit status 2).

Most rows fail before torch is imported (argparse's checks, a missing file): they cost a Python start-up. Those that
need the device (``--device tpu``, detection errors) cost an ``import ditorch``.
"""

from bad_input_table import Row

HINT = r"expected a folder written by OpCapture, e\.g\. op_tools_results/op_capture/<run>"

ROWS: list[Row] = [
    # -- the command itself ----------------------------------------------------------------------------------------
    Row("cli-bare", r"^ditorch: error: no command given \(ditorch <command> --help\)$", ("ditorch",)),
    Row("cli-unknown-command", r"^ditorch: error: argument <command>: invalid choice: 'trian'", ("ditorch", "trian")),
    Row("cli-unknown-option", r"^ditorch: error: unrecognized arguments: --bogus", ("ditorch", "--bogus")),
    Row("cli-debug-malformed", r"^ditorch info: error: environment variable DITORCH_DEBUG='maybe' is not a boolean",
        ("ditorch", "info"), env={"DITORCH_DEBUG": "maybe"}),
    # -- demo ------------------------------------------------------------------------------------------------------
    Row("demo-device-unknown", r"^ditorch demo: error: --device 'tpu': not a device of this process "
                               r"\(expected cpu", ("ditorch", "demo", "--device", "tpu", "--steps", "1")),
    Row("demo-device-index", r"^ditorch demo: error: --device 'dipu:3': there is 1 dipu device \(dipu:0\)$",
        ("ditorch", "demo", "--device", "dipu:3", "--steps", "1")),
    Row("demo-lr-nan", r"^ditorch demo: error: argument --lr: expected a finite number greater than 0 .* got 'nan'",
        ("ditorch", "demo", "--lr", "nan")),
    Row("demo-lr-negative", r"argument --lr: expected a finite number greater than 0 .* got '-0\.1'",
        ("ditorch", "demo", "--lr=-0.1")),
    Row("demo-lr-inf", r"argument --lr: expected a finite number greater than 0 .* got 'inf'",
        ("ditorch", "demo", "--lr", "inf")),
    Row("demo-seed-not-int", r"^ditorch demo: error: argument --seed: expected an integer from 0 to \d+, got 'x'",
        ("ditorch", "demo", "--seed", "x")),
    Row("demo-seed-negative", r"argument --seed: expected an integer from 0 to \d+, got -1",
        ("ditorch", "demo", "--seed=-1")),
    Row("demo-model-unknown", r"^ditorch demo: error: argument --model: invalid choice: 'gpt5' \(choose from 'llama'",
        ("ditorch", "demo", "--model", "gpt5")),
    Row("demo-steps-negative", r"argument --steps: expected a non-negative integer, got -2",
        ("ditorch", "demo", "--steps=-2")),
    Row("demo-fault-malformed", r"^ditorch demo: error: --fault entry 'mm:oops' is malformed",
        ("ditorch", "demo", "--steps", "1", "--device", "dipu", "--fault", "mm:oops")),
    # -- generate --------------------------------------------------------------------------------------------------
    Row("generate-model-unknown", r"^ditorch generate: error: --model 'gpt5': neither a tiny model family",
        ("ditorch", "generate", "--model", "gpt5", "--prompt", "x")),
    Row("generate-model-vision", r"^ditorch generate: error: --model 'internvl': a vision family",
        ("ditorch", "generate", "--model", "internvl", "--prompt", "x")),
    Row("generate-no-prompt", r"^ditorch generate: error: the following arguments are required: --prompt",
        ("ditorch", "generate", "--model", "llama")),
    Row("generate-empty-prompt", r"^ditorch generate: error: --prompt: an empty prompt has no token to start from$",
        ("ditorch", "generate", "--model", "llama", "--prompt", "")),
    Row("generate-max-new-tokens", r"argument --max-new-tokens: expected a positive integer, got 0",
        ("ditorch", "generate", "--model", "llama", "--prompt", "x", "--max-new-tokens", "0")),
    Row("generate-dtype", r"argument --dtype: invalid choice: 'float16'",
        ("ditorch", "generate", "--model", "llama", "--prompt", "x", "--dtype", "float16")),
    Row("generate-device-unknown", r"^ditorch generate: error: --device 'tpu': not a device of this process",
        ("ditorch", "generate", "--model", "llama", "--prompt", "x", "--device", "tpu")),
    # -- info ------------------------------------------------------------------------------------------------------
    Row("info-vendor-unknown", r"^ditorch info: error: DITORCH_VENDOR='foo' is neither a known adapter \(known: .*\) "
                               r"nor an installed plugin package$", ("ditorch", "info"), env={"DITORCH_VENDOR": "foo"}),
    Row("info-json-without-probe", r"^ditorch info: error: --json is the probe's output: use it with --probe$",
        ("ditorch", "info", "--json", "x.json")),
    Row("info-json-folder-missing", r"^ditorch info: error: --json 'nodir/x\.json': the folder .*nodir does not exist",
        ("ditorch", "info", "--probe", "--json", "nodir/x.json")),
    Row("info-probe-without-device", r"^ditorch info: error: --probe: no accelerator to probe \(ditorch runs on the "
                                     r"CPU\)$", ("ditorch", "info", "--probe"), env={"DITORCH_VENDOR": "cpu"}),
    Row("demo-results-dir-is-file", r"^ditorch demo: error: --results-dir 'train\.py': is a file, expected a folder$",
        ("ditorch", "demo", "--autocompare", "--results-dir", "train.py")),
    Row("info-droplet-faults", r"^ditorch info: error: DROPLET_FAULTS entry 'linear:bias=0\.5' is malformed",
        ("ditorch", "info"), env={"DROPLET_FAULTS": "linear:bias=0.5"}),
    Row("info-dipu-device-unknown", r"^ditorch info: error: DIPU_DEVICE='foo' is not a known vendor; "
                                    r"available: droplet", ("ditorch", "info"), env={"DIPU_DEVICE": "foo"}),
    # -- run -------------------------------------------------------------------------------------------------------
    Row("run-cuda-visible-devices", r"^ditorch run: error: CUDA_VISIBLE_DEVICES='7' \(passed to torch_dipu as "
                                    r"DIPU_VISIBLE_DEVICES\): device 7 does not exist \(droplet has 1 device: 0\)$",
        ("ditorch", "run", "--", "train.py"), env={"CUDA_VISIBLE_DEVICES": "7"}),
    Row("run-no-script", r"^ditorch run: error: no script given \(usage: ditorch run \[options\] -- script\.py",
        ("ditorch", "run")),
    Row("run-missing-script", r"^ditorch run: error: can't open file 'missing\.py': No such file$",
        ("ditorch", "run", "--", "missing.py")),
    Row("run-script-is-folder", r"^ditorch run: error: can't open file '\.': is a directory$",
        ("ditorch", "run", "--", ".")),
    Row("run-fallback-regex", r"^ditorch run: error: argument --fallback: 'torch\.\(' is not a valid regular "
                              r"expression", ("ditorch", "run", "--fallback", "torch.(", "--", "train.py")),
    Row("run-dtype-cast", r"^ditorch run: error: argument --dtype-cast: .*'torch\.float16'",
        ("ditorch", "run", "--dtype-cast", "torch.float16", "--", "train.py")),
    # -- profile ---------------------------------------------------------------------------------------------------
    Row("profile-top", r"^ditorch profile: error: argument --top: expected a positive integer, got 0",
        ("ditorch", "profile", "--top", "0", "--", "train.py")),
    Row("profile-sort", r"^ditorch profile: error: argument --sort: invalid choice: 'count'",
        ("ditorch", "profile", "--sort", "count", "--", "train.py")),
    Row("profile-missing-script", r"^ditorch profile: error: can't open file 'missing\.py': No such file$",
        ("ditorch", "profile", "--", "missing.py")),
    Row("profile-out-is-folder", r"^ditorch profile: error: --out '\.': is a folder, expected the trace's file path$",
        ("ditorch", "profile", "--out", ".", "--", "train.py")),
    # -- replay ----------------------------------------------------------------------------------------------------
    Row("replay-script-path", rf"^ditorch replay: error: 'train\.py' is a file, not a folder of captured cases; "
                              rf"{HINT}$", ("ditorch", "replay", "train.py")),
    Row("replay-folder-without-cases", rf"^ditorch replay: error: '\.' holds no captured case .*; {HINT}$",
        ("ditorch", "replay", ".")),
    Row("replay-missing", r"^ditorch replay: error: DIR 'missing': no such file or directory$",
        ("ditorch", "replay", "missing")),
    Row("replay-run-times", r"^ditorch replay: error: argument --run-times: expected a positive integer, got 0",
        ("ditorch", "replay", ".", "--run-times", "0")),
    Row("replay-run-times-upstream-alias", r"argument --run_times: expected a positive integer, got 0",
        ("ditorch", "replay", ".", "--run_times", "0")),
    Row("replay-acc-check-value", r"argument --acc-check: expected true or false, got 'maybe'",
        ("ditorch", "replay", ".", "--acc-check", "maybe")),
    # -- report ----------------------------------------------------------------------------------------------------
    Row("report-missing", r"^ditorch report: error: DIR 'missing': no such file or directory$",
        ("ditorch", "report", "missing")),
    Row("report-no-results", r"^ditorch report: error: no results\.jsonl under \. \(expected a run folder",
        ("ditorch", "report", ".")),
    # -- dump-modules ----------------------------------------------------------------------------------------------
    Row("dump-modules-no-script", r"^ditorch dump-modules: error: no script given", ("ditorch", "dump-modules")),
    Row("dump-modules-missing-script", r"^ditorch dump-modules: error: can't open file 'missing\.py': No such file$",
        ("ditorch", "dump-modules", "--", "missing.py")),
    Row("dump-modules-stop-after", r"argument --stop-after: expected a positive integer, got 0",
        ("ditorch", "dump-modules", "--stop-after", "0", "--", "train.py")),
    Row("dump-modules-fixed-input", r"^ditorch dump-modules: error: --fixed-input 'nope': no such file or directory$",
        ("ditorch", "dump-modules", "--fixed-input", "nope", "--", "train.py")),
    # -- compare-runs ----------------------------------------------------------------------------------------------
    Row("compare-runs-missing", r"^ditorch compare-runs: error: REF 'a': no such file or directory$",
        ("ditorch", "compare-runs", "a", "b")),
    Row("compare-runs-one-dump", r"^ditorch compare-runs: error: the following arguments are required: test",
        ("ditorch", "compare-runs", "a")),
    Row("compare-runs-not-a-dump", r"^ditorch compare-runs: error: .*no module dump here",
        ("ditorch", "compare-runs", ".", ".")),
    # -- parity ----------------------------------------------------------------------------------------------------
    Row("parity-no-script", r"^ditorch parity: error: no script given", ("ditorch", "parity")),
    Row("parity-missing-script", r"^ditorch parity: error: can't open file 'missing\.py': No such file$",
        ("ditorch", "parity", "--", "missing.py")),
    Row("parity-steps", r"^ditorch parity: error: argument --steps: expected a positive integer, got 0",
        ("ditorch", "parity", "--steps", "0", "--", "train.py")),
    Row("parity-reference-missing", r"^ditorch parity: error: --reference 'nope': no such file or directory$",
        ("ditorch", "parity", "--reference", "nope", "--", "train.py")),
    # -- conformance -----------------------------------------------------------------------------------------------
    Row("conformance-no-command", r"^ditorch conformance: error: no conformance command given \(choose from count",
        ("ditorch", "conformance")),
    Row("conformance-unknown-command", r"^ditorch conformance: error: argument <command>: invalid choice: 'runn'",
        ("ditorch", "conformance", "runn")),
    Row("conformance-run-no-target", r"^ditorch conformance run: error: one of the arguments --impl --device is "
                                     r"required", ("ditorch", "conformance", "run")),
    Row("conformance-run-workers", r"argument --workers: expected a positive integer, got '0'",
        ("ditorch", "conformance", "run", "--impl", "droplet", "--workers", "0")),
    Row("conformance-run-impl-option", r"argument --impl-option: expected KEY=VALUE, got 'x'",
        ("ditorch", "conformance", "run", "--impl", "droplet", "--impl-option", "x")),
    Row("conformance-gen-shard", r"^ditorch conformance gen: error: argument --shard: expected I/N with 1 <= I <= N",
        ("ditorch", "conformance", "gen", "--shard", "5/4")),
    Row("conformance-gen-data-is-file", r"^ditorch conformance gen: error: --data 'train\.py': is a file",
        ("ditorch", "conformance", "gen", "--data", "train.py")),
    Row("conformance-count-functions", r"^ditorch conformance count: error: --functions 'diopi\(': not a regular "
                                       r"expression", ("ditorch", "conformance", "count", "--functions", "diopi(")),
    Row("conformance-run-impl-unknown", r"^ditorch conformance run: error: unknown DIOPI implementation 'foo'",
        ("ditorch", "conformance", "run", "--impl", "foo", "--data", ".")),
    Row("conformance-from-capture-missing", r"^ditorch conformance from-capture: error: CAPTURE_DIR 'missing': no "
                                            r"such file or directory$",
        ("ditorch", "conformance", "from-capture", "missing", "out")),
    Row("conformance-from-capture-empty", rf"^ditorch conformance from-capture: error: '\.' holds no captured case; "
                                          rf"{HINT}$", ("ditorch", "conformance", "from-capture", ".", "out")),
    Row("conformance-from-capture-per-function", r"argument --per-function: expected a positive integer, got 0",
        ("ditorch", "conformance", "from-capture", ".", "out", "--per-function", "0")),
]
