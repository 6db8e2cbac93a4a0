"""Bad-input rows: environment variables and op-name lists (docs/environment.md).

Most rows call the package's one config parser in this process (each variable is parsed there and only there);
the commands of the issue run as the user typed them.
"""

from __future__ import annotations

import os

from bad_input_table import Row


def _env(name: str) -> str:
    return os.environ[name]


# -- the parsers each row calls (imported when the row runs) ----------------------------------------------

def ditorch_config() -> object:
    from ditorch.config import DitorchConfig

    return DitorchConfig.from_env()


def ditorch_dtype_cast() -> object:
    from ditorch.mocking.switches import parse_dtype_cast

    return parse_dtype_cast(_env("DITORCH_DTYPE_CAST"))


def strict() -> object:
    from diopi.op_names import strict

    return strict()


def dipu_config() -> object:
    from torch_dipu.config import DipuConfig

    return DipuConfig.from_env()


def dipu_vendor() -> object:
    from torch_dipu.vendors import load_vendor

    return load_vendor(dipu_config().vendor)


def dipu_fallback_list() -> object:
    from torch_dipu.config import checked_op_list

    return checked_op_list(dipu_config().force_fallback, "DIPU_FORCE_FALLBACK_OPS_LIST")


def dipu_autocompare_list() -> object:
    from torch_dipu.config import checked_op_list

    return checked_op_list(dipu_config().autocompare_ops, "DIPU_AUTOCOMPARE_OPS_LIST")


def droplet_traits() -> object:
    from diopi.impl.droplet.traits import DropletTraits

    return DropletTraits.from_env()


def droplet_faults() -> object:
    from diopi.impl.droplet.traits import faults_from_env

    return faults_from_env()


def tolerances() -> object:
    from diopi.compare import check_tolerance_env

    return check_tolerance_env()


def op_config(name: str):
    def parse() -> object:
        from op_tools import config

        return getattr(config, name)()
    return parse


def op_filter(prefix: str):
    def build() -> object:
        from op_tools.op_filter import OpFilter

        return OpFilter(prefix)
    return build


def op_rank() -> object:
    from op_tools.config import rank

    return rank()


def op_results_dir() -> object:
    from op_tools.config import results_dir

    return results_dir()


def op_run_id() -> object:
    from op_tools.config import run_id

    return run_id()


def op_verbose() -> object:
    from op_tools.config import verbose

    return verbose()


def op_device() -> object:
    import op_tools

    return op_tools.OpObserve()


def world_size() -> object:
    from diopi.result_table import process_world_size

    return process_world_size()


def launch_run_id() -> object:
    from diopi.result_table import launch_run_id

    return launch_run_id()


def module_dump() -> object:
    from module_tools.config import dump_config

    return dump_config()


def dicp_config() -> object:
    from dicp.config import parse_config

    return parse_config()


def dlinfer_config() -> object:
    from dlinfer.config import parse_config

    return parse_config()


def call(id: str, env: dict[str, str], parse, expect: str) -> Row:
    """A row that sets ``env`` and calls ``parse``, which must raise ConfigError matching ``expect``."""
    return Row(id=id, env=env, call=parse, expect=expect)


STRICT = {"DITORCH_STRICT": "1"}
RUN = ("ditorch", "run", "--", "train.py")

ROWS: list[Row] = [
    # -- the commands, as typed ------------------------------------------------------------------
    Row("fallback-list-misspelt-warns", env={"DIPU_FORCE_FALLBACK_OPS_LIST": "linaer"}, argv=RUN, status=0,
        expect=r"DIPU_FORCE_FALLBACK_OPS_LIST entry 'linaer' names no operator \(did you mean linear\?\)"),
    Row("fallback-list-misspelt-exit-line", env={"DIPU_FORCE_FALLBACK_OPS_LIST": "linaer"}, argv=RUN, status=0,
        expect=r"'linaer' matched no call; ops that ran with a similar name: linear"),
    Row("fallback-list-misspelt-strict", env={"DIPU_FORCE_FALLBACK_OPS_LIST": "linaer", **STRICT}, argv=RUN,
        expect=r"DIPU_FORCE_FALLBACK_OPS_LIST entry 'linaer' names no operator \(did you mean linear\?\)"),
    Row("faults-misspelt-op-warns", env={"DROPLET_FAULTS": "linaer:bias:0.5"}, argv=RUN, status=0,
        expect=r"DROPLET_FAULTS entry 'linaer' names no operator \(did you mean linear\?\)"),
    Row("faults-misspelt-op-strict", env={"DROPLET_FAULTS": "linaer:bias:0.5", **STRICT}, argv=RUN,
        expect=r"DROPLET_FAULTS entry 'linaer' names no operator"),
    Row("faults-op-that-never-ran", env={"DROPLET_FAULTS": "max_pool2d_with_indices:bias"}, argv=RUN, status=0,
        expect=r"DROPLET_FAULTS entry 'max_pool2d_with_indices' matched no call"),
    Row("faults-equals-instead-of-colon", env={"DROPLET_FAULTS": "linear:bias=0.5"}, argv=RUN,
        expect=r"DROPLET_FAULTS entry 'linear:bias=0\.5' is malformed.*did you mean 'linear:bias:0\.5'"),
    Row("faults-misspelt-kind", env={"DROPLET_FAULTS": "linear:biass:0.01"}, argv=RUN,
        expect=r"DROPLET_FAULTS entry 'linear:biass:0\.01' is malformed.*did you mean 'linear:bias:0\.01'"),
    Row("autocompare-list-misspelt-warns", env={"OP_AUTOCOMPARE_LIST": "torch.nn.functional.linaer"},
        argv=("ditorch", "run", "--autocompare", "--", "train.py"), status=0,
        expect=r"OP_AUTOCOMPARE_LIST entry 'torch\.nn\.functional\.linaer' names no operator \(did you mean "
               r"torch\.nn\.functional\.linear\?\)"),
    Row("autocompare-list-misspelt-strict", env={"OP_AUTOCOMPARE_LIST": "torch.nn.functional.linaer", **STRICT},
        argv=("ditorch", "run", "--autocompare", "--", "train.py"),
        expect=r"OP_AUTOCOMPARE_LIST entry 'torch\.nn\.functional\.linaer' names no operator"),
    Row("tolerance-not-numbers", env={"AUTOCOMPARE_ERROR_TOLERANCE": "abc"},
        argv=("ditorch", "run", "--autocompare", "--", "train.py"),
        expect=r"AUTOCOMPARE_ERROR_TOLERANCE='abc': expected 'atol,rtol'"),
    Row("dipu-device-unknown", env={"DIPU_DEVICE": "dropplet"}, argv=RUN,
        expect=r"DIPU_DEVICE='dropplet' is not a known vendor"),
    # -- ditorch ----------------------------------------------------------------------------------------
    call("ditorch-quiet", {"DITORCH_QUIET": "maybe"}, ditorch_config, r"DITORCH_QUIET='maybe' is not a boolean"),
    call("ditorch-disable-mock", {"DITORCH_DISABLE_MOCK": "2"}, ditorch_config, r"DITORCH_DISABLE_MOCK='2'"),
    call("ditorch-show-as-cuda", {"DITORCH_SHOW_DEVICE_AS_CUDA": "cuda"}, ditorch_config,
         r"DITORCH_SHOW_DEVICE_AS_CUDA='cuda' is not a boolean"),
    call("ditorch-dtype-cast", {"DITORCH_DTYPE_CAST": "float64:flaot32"}, ditorch_dtype_cast,
         r"DITORCH_DTYPE_CAST.*'flaot32' is not a torch dtype"),
    call("ditorch-strict", {"DITORCH_STRICT": "always"}, strict, r"DITORCH_STRICT='always' is not a boolean"),
    # -- torch_dipu -------------------------------------------------------------------------------------
    call("dipu-device-unknown-call", {"DIPU_DEVICE": "nosuch"}, dipu_vendor, r"DIPU_DEVICE='nosuch'"),
    call("dipu-fallback-bad-regex", {"DIPU_FORCE_FALLBACK_OPS_LIST": "lin(ear"}, dipu_fallback_list,
         r"DIPU_FORCE_FALLBACK_OPS_LIST: entry 'lin\(ear' is not a valid regular expression"),
    call("dipu-fallback-strict-regex", {"DIPU_FORCE_FALLBACK_OPS_LIST": "convolution_nope.*", **STRICT},
         dipu_fallback_list, r"entry 'convolution_nope\.\*' names no operator"),
    call("dipu-visible-devices", {"DIPU_VISIBLE_DEVICES": "0,one"}, dipu_config,
         r"DIPU_VISIBLE_DEVICES='0,one': 'one' is not a device index"),
    call("dipu-visible-devices-twice", {"DIPU_VISIBLE_DEVICES": "1,1"}, dipu_config, r"device 1 is listed twice"),
    call("dipu-log-fallback", {"DIPU_LOG_FALLBACK_INFO": "verbose"}, dipu_config,
         r"DIPU_LOG_FALLBACK_INFO='verbose' is not a boolean"),
    # torch_dipu watches os.environ["DIPU_DUMP_OP_ARGS"] once imported: its parser is called with the text
    Row("dipu-dump-op-args", call=lambda: __import__("torch_dipu.config").config.parse_dump_level("7"),
        covers=("DIPU_DUMP_OP_ARGS",), expect=r"DIPU_DUMP_OP_ARGS='7' is not a dump level"),
    call("dipu-autocompare-list", {"DIPU_AUTOCOMPARE_OPS_LIST": "addd", **STRICT}, dipu_autocompare_list,
         r"DIPU_AUTOCOMPARE_OPS_LIST entry 'addd' names no operator \(did you mean add"),
    call("dipu-memcaching", {"DIPU_DEVICE_MEMCACHING_ALGORITHM": "LRU"}, dipu_config,
         r"DIPU_DEVICE_MEMCACHING_ALGORITHM='LRU' is not an allocator algorithm"),
    call("dicl-check-collectives", {"DICL_CHECK_COLLECTIVES": "sometimes"}, dipu_config,
         r"DICL_CHECK_COLLECTIVES='sometimes' is not a boolean"),
    call("dipu-fast-path", {"DIPU_FAST_PATH": "fastest"}, dipu_config, r"DIPU_FAST_PATH='fastest' is not a boolean"),
    call("dipu-mem-check", {"DIPU_MEM_CHECK": "full"}, dipu_config, r"DIPU_MEM_CHECK='full' is not a boolean"),
    call("dipu-mem-check-backtrace", {"DIPU_MEM_CHECK_ENABLE_BACKTRACE": "deep"}, dipu_config,
         r"DIPU_MEM_CHECK_ENABLE_BACKTRACE='deep' is not a boolean"),
    call("dipu-mem-check-max-block", {"DIPU_MEM_CHECK_MAX_BLOCK": "-5"}, dipu_config,
         r"DIPU_MEM_CHECK_MAX_BLOCK='-5' is not a positive integer"),
    call("dipu-mem-check-interval", {"DIPU_MEM_CHECK_LOG_INTERVAL": "0"}, dipu_config,
         r"DIPU_MEM_CHECK_LOG_INTERVAL='0' is not a positive integer"),
    call("dipu-tolerance-at-import", {"AUTOCOMPARE_ERROR_TOLERANCE_FLOAT32": "1e-5"}, dipu_config,
         r"AUTOCOMPARE_ERROR_TOLERANCE_FLOAT32='1e-5': expected 'atol,rtol'"),
    call("dipu-compile-backend", {"DIPU_COMPILE_BACKEND": "onnxgrpah"},
         lambda: __import__("torch_dipu.compile_default").compile_default.check_backend(_env("DIPU_COMPILE_BACKEND")),
         r"DIPU_COMPILE_BACKEND='onnxgrpah' is not a registered torch.compile backend \(did you mean onnxgraph\?\)"),
    # -- droplet ----------------------------------------------------------------------------------------
    call("droplet-device-count", {"DROPLET_DEVICE_COUNT": "two"}, droplet_traits,
         r"DROPLET_DEVICE_COUNT='two' is not an integer"),
    call("droplet-memory-capacity", {"DROPLET_MEMORY_CAPACITY": "lots"}, droplet_traits,
         r"DROPLET_MEMORY_CAPACITY='lots' is not a size"),
    call("droplet-unsupported-dtypes", {"DROPLET_UNSUPPORTED_DTYPES": "flot16"}, droplet_traits,
         r"DROPLET_UNSUPPORTED_DTYPES: 'flot16' is not a torch dtype"),
    call("droplet-matmul-precision", {"DROPLET_MATMUL_PRECISION": "ultra"}, droplet_traits,
         r"DROPLET_MATMUL_PRECISION='ultra': expected one of highest, high, medium"),
    call("droplet-malloc-latency", {"DROPLET_MALLOC_LATENCY_US": "slow"}, droplet_traits,
         r"DROPLET_MALLOC_LATENCY_US='slow' is not a number"),
    call("droplet-faults-param", {"DROPLET_FAULTS": "mm:bias:big"}, droplet_faults,
         r"DROPLET_FAULTS entry 'mm:bias:big': parameter 'big' is not a number"),
    call("droplet-faults-no-param-kind", {"DROPLET_FAULTS": "mm:nan:3"}, droplet_faults,
         r"DROPLET_FAULTS entry 'mm:nan:3': fault 'nan' takes no parameter"),
    call("droplet-faults-empty-pattern", {"DROPLET_FAULTS": ":bias"}, droplet_faults,
         r"DROPLET_FAULTS entry ':bias' has an empty op pattern"),
    call("droplet-faults-bad-regex", {"DROPLET_FAULTS": "mm(:bias"}, droplet_faults,
         r"DROPLET_FAULTS entry 'mm\(:bias': 'mm\(' is not a valid regular expression"),
    # -- diopi.compare's tolerances -----------------------------------------------------------------------
    call("tolerance-dtype-misspelt", {"AUTOCOMPARE_ERROR_TOLERANCE_BFLAOT16": "1e-3,1e-2"}, tolerances,
         r"AUTOCOMPARE_ERROR_TOLERANCE_BFLAOT16: 'BFLAOT16' .* is not a floating dtype \(did you mean BFLOAT16\?\)"),
    call("tolerance-dtype-op", {"AUTOCOMPARE_ERROR_TOLERANCE_FLOAT16_ADD": "1e-3"}, tolerances,
         r"AUTOCOMPARE_ERROR_TOLERANCE_FLOAT16_ADD='1e-3': expected 'atol,rtol'"),
    call("tolerance-op-dtype", {"LINEAR_AUTOCOMPARE_ERROR_TOLERANCE_BFLOAT16": "-1,0.1"}, tolerances,
         r"LINEAR_AUTOCOMPARE_ERROR_TOLERANCE_BFLOAT16='-1,0\.1': expected 'atol,rtol', two non-negative"),
    call("tolerance-op-without-dtype", {"LINEAR_AUTOCOMPARE_ERROR_TOLERANCE": "1e-3,1e-2"}, tolerances,
         r"LINEAR_AUTOCOMPARE_ERROR_TOLERANCE: 'nothing' after .* is not a floating dtype"),
    # -- op_tools ---------------------------------------------------------------------------------------
    call("op-results-dir-is-a-file", {"OP_TOOLS_RESULTS_DIR": "train.py"}, op_results_dir,
         r"OP_TOOLS_RESULTS_DIR='train\.py' is a file; expected a folder"),
    call("op-run-id-path", {"OP_TOOLS_RUN_ID": "../elsewhere"}, op_run_id,
         r"OP_TOOLS_RUN_ID='\.\./elsewhere': expected one folder name"),
    call("rank-not-int", {"RANK": "zero"}, op_rank, r"RANK='zero': expected an integer >= 0"),
    call("world-size-not-int", {"WORLD_SIZE": "two"}, world_size, r"WORLD_SIZE='two': expected an integer >= 1"),
    call("restart-count-not-int", {"WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "x"}, launch_run_id,
         r"TORCHELASTIC_RESTART_COUNT='x': expected an integer >= 0"),
    call("op-device", {"OP_TOOLS_DEVICE": "tpu"}, op_device, r"OP_TOOLS_DEVICE / device='tpu' is not a device"),
    call("op-verbose", {"OP_TOOLS_VERBOSE": "very"}, op_verbose, r"OP_TOOLS_VERBOSE='very' is not a boolean"),
    call("op-capture-list", {"OP_CAPTURE_LIST": "torch.addd", **STRICT}, op_filter("OP_CAPTURE"),
         r"OP_CAPTURE_LIST entry 'torch\.addd' names no operator \(did you mean torch\.add"),
    call("op-capture-disable-list", {"OP_CAPTURE_DISABLE_LIST": "torch.Tensor.itme", **STRICT},
         op_filter("OP_CAPTURE"), r"OP_CAPTURE_DISABLE_LIST entry 'torch\.Tensor\.itme' names no operator "
                                  r"\(did you mean torch\.Tensor\.item\b"),
    call("op-capture-mode", {"OP_CAPTURE_MODE": "everything"}, op_config("capture_config"),
         r"OP_CAPTURE_MODE='everything': expected one of data, stats"),
    call("op-capture-max-bytes", {"OP_CAPTURE_MAX_BYTES": "lots"}, op_config("capture_config"),
         r"OP_CAPTURE_MAX_BYTES='lots' is not a byte size"),
    call("op-capture-steps", {"OP_CAPTURE_STEPS": "0"}, op_config("capture_config"),
         r"OP_CAPTURE_STEPS='0': steps are numbered from 1"),
    call("op-observe-list", {"OP_OBSERVE_LIST": "torch.matmull", **STRICT}, op_filter("OP_OBSERVE"),
         r"OP_OBSERVE_LIST entry 'torch\.matmull' names no operator \(did you mean torch\.matmul"),
    call("op-observe-file", {"OP_OBSERVE_FILE": "."}, op_config("observe_config"), r"OP_OBSERVE_FILE='\.'"),
    call("op-autocompare-list-regex", {"OP_AUTOCOMPARE_LIST": "torch.nn.functional.(linear"},
         op_filter("OP_AUTOCOMPARE"), r"OP_AUTOCOMPARE_LIST: entry 'torch\.nn\.functional\.\(linear' is not a valid"),
    call("op-autocompare-steps", {"OP_AUTOCOMPARE_STEPS": "3-1"}, op_config("autocompare_config"),
         r"OP_AUTOCOMPARE_STEPS='3-1'"),
    call("op-autocompare-max-cases", {"OP_AUTOCOMPARE_MAX_CASES": "-1"}, op_config("autocompare_config"),
         r"OP_AUTOCOMPARE_MAX_CASES='-1': expected a non-negative integer"),
    call("op-autocompare-disable-list", {"OP_AUTOCOMPARE_DISABLE_LIST": "torch.nn.functional.dropuot", **STRICT},
         op_filter("OP_AUTOCOMPARE"), r"did you mean torch\.nn\.functional\.dropout\b"),
    call("op-overflow-list", {"OP_OVERFLOW_CHECK_LIST": "torch.lgo", **STRICT}, op_filter("OP_OVERFLOW_CHECK"),
         r"OP_OVERFLOW_CHECK_LIST entry 'torch\.lgo' names no operator \(did you mean torch\.log"),
    call("op-overflow-steps", {"OP_OVERFLOW_CHECK_STEPS": "first"}, op_config("overflow_check_config"),
         r"OP_OVERFLOW_CHECK_STEPS='first' is not a step range"),
    call("op-time-mode", {"OP_TIME_MEASURE_MODE": "fast"}, op_config("time_measure_config"),
         r"OP_TIME_MEASURE_MODE='fast': expected one of event, sync"),
    call("op-time-list", {"OP_TIME_MEASURE_LIST": "torch.nn.functional.sofmax", **STRICT},
         op_filter("OP_TIME_MEASURE"), r"did you mean torch\.nn\.functional\.softmax"),
    call("op-time-steps", {"OP_TIME_MEASURE_STEPS": "2-x"}, op_config("time_measure_config"),
         r"OP_TIME_MEASURE_STEPS='2-x' is not a step range"),
    call("op-time-top", {"OP_TIME_MEASURE_TOP": "ten"}, op_config("time_measure_config"),
         r"OP_TIME_MEASURE_TOP='ten': expected a non-negative integer"),
    call("op-profiler-ranges-list", {"OP_PROFILER_RANGES_LIST": "torch.nn.functional.lineer", **STRICT},
         op_filter("OP_PROFILER_RANGES"), r"did you mean torch\.nn\.functional\.linear"),
    call("op-fallback-list", {"OP_FALLBACK_LIST": "linear", **STRICT}, op_filter("OP_FALLBACK"),
         r"OP_FALLBACK_LIST entry 'linear' names no operator \(did you mean .*torch\.nn\.functional\.linear"),
    call("op-fallback-retry", {"OP_FALLBACK_RETRY_FLOAT32": "twice"}, op_config("fallback_config"),
         r"OP_FALLBACK_RETRY_FLOAT32='twice' is not a boolean"),
    call("op-dtype-cast-list", {"OP_DTYPE_CAST_LIST": "torch.bmmm", **STRICT}, op_filter("OP_DTYPE_CAST"),
         r"did you mean torch\.bmm"),
    call("op-dtype-cast-dict", {"OP_DTYPE_CAST_DICT": "torch.float16->torch.flaot32"},
         op_config("dtype_cast_config"), r"OP_DTYPE_CAST_DICT.*'torch\.flaot32' is not a floating dtype"),
    Row("apply-feature-misspelt-op", expect=r"apply_feature\(ops=\.\.\.\): cannot find the function "
        r"'torch\.nn\.functional\.linaer' \(did you mean torch\.nn\.functional\.linear\?\)",
        call=lambda: __import__("op_tools").apply_feature(ops=["torch.nn.functional.linaer"], feature="fallback")),
    # -- module_tools, dicp, dlinfer ---------------------------------------------------------------------
    call("module-dump-dir-file", {"MODULE_DUMP_DIR": "train.py"}, module_dump,
         r"MODULE_DUMP_DIR='train\.py' is a file; expected a folder"),
    call("module-dump-stats-only", {"MODULE_DUMP_STATS_ONLY": "partly"}, module_dump,
         r"MODULE_DUMP_STATS_ONLY='partly' is not a boolean"),
    call("module-dump-steps", {"MODULE_DUMP_STEPS": "x-y"}, module_dump,
         r"MODULE_DUMP_STEPS='x-y' is not a step range"),
    call("module-dump-fixed-input", {"MODULE_DUMP_FIXED_INPUT": "no_such_dump"}, module_dump,
         r"MODULE_DUMP_FIXED_INPUT='no_such_dump' is not a folder"),
    call("dicp-cache-dir-file", {"DICP_CACHE_DIR": "train.py"}, dicp_config,
         r"DICP_CACHE_DIR='train\.py' is a file; expected a folder"),
    call("dicp-cache", {"DICP_CACHE": "maybe"}, dicp_config, r"DICP_CACHE='maybe' is not a boolean"),
    call("dicp-precision-check", {"DICP_PRECISION_CHECK": "strict"}, dicp_config,
         r"DICP_PRECISION_CHECK='strict' is not a boolean"),
    call("dicp-shape-check", {"DICP_SHAPE_CHECK": "2"}, dicp_config, r"DICP_SHAPE_CHECK='2' is not a boolean"),
    call("dicp-ort-threads", {"DICP_ORT_THREADS": "-2"}, dicp_config, r"DICP_ORT_THREADS='-2': expected a thread"),
    call("dicp-ort-spin", {"DICP_ORT_SPIN": "fast"}, dicp_config, r"DICP_ORT_SPIN='fast' is not a boolean"),
    call("dicp-report", {"DICP_REPORT": "all"}, dicp_config, r"DICP_REPORT='all' is not a boolean"),
    call("dicp-strict", {"DICP_STRICT": "very"}, dicp_config, r"DICP_STRICT='very' is not a boolean"),
    call("dlinfer-kernels", {"DLINFER_KERNELS": "fastest"}, dlinfer_config,
         r"DLINFER_KERNELS='fastest': expected one of vendor, reference"),
    call("dlinfer-linear-layout", {"DLINFER_LINEAR_USE_NN_LAYOUT": "yes"}, dlinfer_config,
         r"DLINFER_LINEAR_USE_NN_LAYOUT='yes': expected 0 or 1"),
]
