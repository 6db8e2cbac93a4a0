"""Every environment variable torch_dipu reads, in one place (documented in docs/environment.md)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diopi.env import ATEN_PREFIXES, ConfigError, env_flag, split_list
from diopi.op_names import CheckedOpList, aten_names

FALLBACK_CONFIG_FILE = ".dipu_force_fallback_op_list.config"
AUTOCOMPARE_CONFIG_FILE = ".specified_autocompare_op_list.config"
VISIBLE_DEVICES = "DIPU_VISIBLE_DEVICES"
DUMP_OP_ARGS = "DIPU_DUMP_OP_ARGS"
MEMCACHING_ALGORITHM = "DIPU_DEVICE_MEMCACHING_ALGORITHM"
#: ``DIPU_DUMP_OP_ARGS`` levels: what each prints.
DUMP_LEVELS = {0: "nothing", 1: "the ATen op and its DIOPI function", 2: "plus every argument",
               3: "plus tensor values"}
#: ``DIPU_DEVICE_MEMCACHING_ALGORITHM`` values (upstream's names): best-fit caching with block splitting (as
#: CUDA's allocator), size-bin caching (power-of-two bins, no splitting), or none (every block straight
#: from the vendor's malloc and back to its free).
MEMCACHING_ALGORITHMS = {"BF": "best-fit caching", "BS": "size-bin caching", "RAW": "no caching"}


def parse_dump_level(text: str | None, source: str = DUMP_OP_ARGS) -> int:
    """``DIPU_DUMP_OP_ARGS``: 0-3 (unset or empty: 0); anything else raises ``ValueError`` naming ``source``."""
    value = (text or "").strip() or "0"
    if value not in {str(level) for level in DUMP_LEVELS}:
        levels = "; ".join(f"{level}: {what}" for level, what in DUMP_LEVELS.items())
        raise ConfigError(f"{source}={text!r} is not a dump level (expected 0-3: {levels})")
    return int(value)


def parse_memcaching_algorithm(text: str | None, source: str = MEMCACHING_ALGORITHM) -> str:
    """``DIPU_DEVICE_MEMCACHING_ALGORITHM``: ``BF`` (default), ``BS`` or ``RAW``, case-insensitive; anything
    else raises ``ValueError`` naming ``source``."""
    value = (text or "").strip().upper() or "BF"
    if value not in MEMCACHING_ALGORITHMS:
        known = ", ".join(f"{name} ({what})" for name, what in MEMCACHING_ALGORITHMS.items())
        raise ConfigError(f"{source}={text!r} is not an allocator algorithm (expected one of {known})")
    return value


def parse_count(text: str | None, source: str, default: int) -> int:
    """A positive integer variable (unset or empty: ``default``); anything else raises naming ``source``."""
    value = (text or "").strip()
    if not value:
        return default
    if not re.fullmatch(r"[0-9]+", value) or int(value) <= 0:
        raise ConfigError(f"{source}={text!r} is not a positive integer")
    return int(value)


def _list_with_file(variable: str, file_name: str, cwd: Path | None) -> list[str]:
    """Entries of list variable ``variable`` followed by those of ``file_name`` in the working directory."""
    entries = split_list(os.environ.get(variable, ""))
    config_file = (cwd or Path.cwd()) / file_name
    if config_file.is_file():
        entries += split_list(config_file.read_text())
    return entries


def parse_visible_devices(text: str | None, source: str = VISIBLE_DEVICES) -> list[int] | None:
    """``DIPU_VISIBLE_DEVICES``: the vendor's device indices torch_dipu exposes, in order (``"2,0"`` ->
    ``[2, 0]``: ``dipu:0`` is physical device 2). None (unset): every device; empty or ``-1``: none.
    A malformed entry or a duplicate raises ``ValueError`` naming the variable; whether the indices exist
    is checked against the vendor (:func:`torch_dipu.state.resolve_visible`)."""
    if text is None:
        return None
    if text.strip() in ("", "-1"):
        return []
    indices: list[int] = []
    for entry in (e.strip() for e in text.split(",")):
        if not re.fullmatch(r"[0-9]+", entry):
            raise ConfigError(
                f"{source}={text!r}: {entry!r} is not a device index (expected comma-separated indices such "
                "as 0,1; empty or -1 hides every device)"
            )
        index = int(entry)
        if index in indices:
            raise ConfigError(f"{source}={text!r}: device {index} is listed twice")
        indices.append(index)
    return indices


def checked_op_list(entries: list[str], source: str) -> CheckedOpList:
    """An ATen operator-name list (``DIPU_FORCE_FALLBACK_OPS_LIST``, ``DIPU_AUTOCOMPARE_OPS_LIST``) checked
    against the operators the dispatcher knows: a misspelt entry is one warning line now (an error with
    ``DITORCH_STRICT=1``) and one line at exit if it matched no call (:mod:`diopi.op_names`)."""
    names = CheckedOpList(entries, source, aten_names, strip_prefixes=ATEN_PREFIXES)
    names.check()
    return names


@dataclass
class DipuConfig:
    """Settings read from the environment when torch_dipu is imported."""

    vendor: str = "droplet"
    force_fallback: list[str] = field(default_factory=list)
    log_fallback: bool = False
    #: ``DIPU_COMPILE_BACKEND``: the dynamo backend for graphs on dipu under ``torch.compile``'s default
    #: backend; empty: the vendor runtime's ``compile_backend``, else ``aot_eager`` (torch_dipu.compile_default).
    compile_backend: str = ""
    #: ``DIPU_VISIBLE_DEVICES``: the vendor's device indices exposed as dipu:0..k-1; None (unset): all.
    visible_devices: list[int] | None = None
    #: Its text as given (for messages).
    visible_devices_text: str | None = None
    #: ``DIPU_DUMP_OP_ARGS`` at import (0-3); changes at run time are followed by torch_dipu.dump_args.
    dump_op_args: int = 0
    #: ``DIPU_AUTOCOMPARE_OPS_LIST`` entries, then those of ``.specified_autocompare_op_list.config``.
    autocompare_ops: list[str] = field(default_factory=list)
    #: ``OP_TOOLS_RESULTS_DIR`` / ``OP_TOOLS_RUN_ID``: where the auto-compare table goes (as op_tools' tables);
    #: empty: ``./op_tools_results`` and the time at the first row.
    results_dir: str = ""
    run_id: str = ""
    #: ``DIPU_MEM_CHECK``: record every device allocation and free; report live blocks at exit.
    mem_check: bool = False
    #: ``DIPU_MEM_CHECK_ENABLE_BACKTRACE``: keep the Python stack of each allocation for the report.
    mem_check_backtrace: bool = False
    #: ``DIPU_MEM_CHECK_MAX_BLOCK``: live blocks above which the checker warns of a likely leak.
    mem_check_max_block: int = 10000
    #: ``DIPU_MEM_CHECK_LOG_INTERVAL``: one line with the live blocks and bytes every this many allocations.
    mem_check_log_interval: int = 1000
    #: ``DIPU_DEVICE_MEMCACHING_ALGORITHM``: ``BF``, ``BS`` or ``RAW`` (:data:`MEMCACHING_ALGORITHMS`).
    memcaching_algorithm: str = "BF"
    #: ``DICL_CHECK_COLLECTIVES`` (default on): before each collective on dipu tensors, the ranks exchange the op,
    #: dtype and shape they pass, so a mismatch is an error on every rank instead of a hang (torch_dipu.dicl).
    check_collectives: bool = True
    #: ``DIPU_FAST_PATH`` (default on): the common call of an operator runs through the compiled fast path
    #: (torch_dipu._fastpath, where it was built); off: every call takes the Python path.
    fast_path: bool = True

    @classmethod
    def from_env(cls, cwd: Path | None = None) -> DipuConfig:
        from diopi.compare import check_tolerance_env

        env = os.environ
        check_tolerance_env(env)  # DIPU_AUTOCOMPARE_OPS_LIST judges with them: a bad one is an error now
        return cls(
            vendor=os.environ.get("DIPU_DEVICE", "droplet").strip() or "droplet",
            force_fallback=_list_with_file("DIPU_FORCE_FALLBACK_OPS_LIST", FALLBACK_CONFIG_FILE, cwd),
            log_fallback=env_flag("DIPU_LOG_FALLBACK_INFO"),
            compile_backend=os.environ.get("DIPU_COMPILE_BACKEND", "").strip(),
            visible_devices=parse_visible_devices(os.environ.get(VISIBLE_DEVICES)),
            visible_devices_text=os.environ.get(VISIBLE_DEVICES),
            dump_op_args=parse_dump_level(env.get(DUMP_OP_ARGS)),
            autocompare_ops=_list_with_file("DIPU_AUTOCOMPARE_OPS_LIST", AUTOCOMPARE_CONFIG_FILE, cwd),
            results_dir=env.get("OP_TOOLS_RESULTS_DIR", "").strip(),
            run_id=env.get("OP_TOOLS_RUN_ID", "").strip(),
            mem_check=env_flag("DIPU_MEM_CHECK"),
            mem_check_backtrace=env_flag("DIPU_MEM_CHECK_ENABLE_BACKTRACE"),
            mem_check_max_block=parse_count(env.get("DIPU_MEM_CHECK_MAX_BLOCK"), "DIPU_MEM_CHECK_MAX_BLOCK", 10000),
            mem_check_log_interval=parse_count(env.get("DIPU_MEM_CHECK_LOG_INTERVAL"),
                                               "DIPU_MEM_CHECK_LOG_INTERVAL", 1000),
            memcaching_algorithm=parse_memcaching_algorithm(env.get(MEMCACHING_ALGORITHM)),
            check_collectives=env_flag("DICL_CHECK_COLLECTIVES", default=True),
            fast_path=env_flag("DIPU_FAST_PATH", default=True),
        )
