"""Every environment variable torch_dipu reads, in one place (documented in docs/environment.md)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diopi.env import compile_op_list, env_flag, split_list, strip_op_prefix

FALLBACK_CONFIG_FILE = ".dipu_force_fallback_op_list.config"
VISIBLE_DEVICES = "DIPU_VISIBLE_DEVICES"


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
            raise ValueError(
                f"{source}={text!r}: {entry!r} is not a device index (expected comma-separated indices such "
                "as 0,1; empty or -1 hides every device)"
            )
        index = int(entry)
        if index in indices:
            raise ValueError(f"{source}={text!r}: device {index} is listed twice")
        indices.append(index)
    return indices


ATEN_PREFIXES = ("aten.", "aten::")


def op_pattern_text(entry: str) -> str:
    """An operator-name pattern without the ``aten.`` / ``aten::`` prefix that log lines print."""
    return strip_op_prefix(entry, ATEN_PREFIXES)


def compile_patterns(entries: list[str], source: str) -> list[re.Pattern[str]]:
    """Compile operator-name list entries as whole-name regular expressions (an ``aten.`` prefix is
    allowed); a bad entry raises naming it (:func:`diopi.env.compile_op_list`)."""
    return compile_op_list(entries, source, ATEN_PREFIXES)


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

    @classmethod
    def from_env(cls, cwd: Path | None = None) -> DipuConfig:
        entries = split_list(os.environ.get("DIPU_FORCE_FALLBACK_OPS_LIST", ""))
        config_file = (cwd or Path.cwd()) / FALLBACK_CONFIG_FILE
        if config_file.is_file():
            entries += split_list(config_file.read_text())
        return cls(
            vendor=os.environ.get("DIPU_DEVICE", "droplet").strip() or "droplet",
            force_fallback=entries,
            log_fallback=env_flag("DIPU_LOG_FALLBACK_INFO"),
            compile_backend=os.environ.get("DIPU_COMPILE_BACKEND", "").strip(),
            visible_devices=parse_visible_devices(os.environ.get(VISIBLE_DEVICES)),
            visible_devices_text=os.environ.get(VISIBLE_DEVICES),
        )
