"""Every environment variable torch_dipu reads, in one place (documented in docs/environment.md)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diopi.env import env_flag, split_list

FALLBACK_CONFIG_FILE = ".dipu_force_fallback_op_list.config"


def op_pattern_text(entry: str) -> str:
    """An operator-name pattern without the ``aten.`` / ``aten::`` prefix that log lines print."""
    entry = entry.strip()
    for prefix in ("aten.", "aten::"):
        if entry.startswith(prefix):
            return entry[len(prefix):]
    return entry


def compile_patterns(entries: list[str], source: str) -> list[re.Pattern[str]]:
    """Compile operator-name list entries as whole-name regular expressions (an ``aten.`` prefix is
    allowed); a bad entry raises naming it."""
    patterns = []
    for entry in entries:
        try:
            patterns.append(re.compile(op_pattern_text(entry)))
        except re.error as exc:
            raise ValueError(f"{source}: entry {entry!r} is not a valid regular expression: {exc}") from None
    return patterns


@dataclass
class DipuConfig:
    """Settings read from the environment when torch_dipu is imported."""

    vendor: str = "droplet"
    force_fallback: list[str] = field(default_factory=list)
    log_fallback: bool = False

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
        )
