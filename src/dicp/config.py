"""Every environment variable dicp reads, in one place (documented in docs/environment.md), parsed once when a
backend is first used (:func:`dicp_config`), never per call.

- ``DICP_PRECISION_CHECK=1``: each compiled graph also runs eagerly and the two are compared with ``diopi.compare``.
- ``DICP_CACHE_DIR``: the compile cache folder (default ``~/.cache/dicp``); ``DICP_CACHE=0`` turns the cache off.
- ``DICP_SHAPE_CHECK=1``: the vendor's own shape and dtype inference is checked against the fake tensors.
- ``DICP_STRICT=1``: a vendor compile failure raises ``DicpCompileError`` (default: printed once, the island runs
  eagerly).
- ``DICP_REPORT=1``: each compiled graph prints its islands on stderr: the vendor islands' sizes and every eager
  island's nodes, each with the reason it stays eager.
- ``DICP_ORT_THREADS``: ONNX Runtime's intra-op threads (default: ``torch.get_num_threads()``).
- ``DICP_ORT_SPIN=1``: ONNX Runtime's idle threads spin instead of sleeping (default off).

A malformed value raises ``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from diopi.env import ConfigError, env_flag, folder_path

__all__ = ["DicpConfig", "dicp_config", "parse_config", "reset_config"]


@dataclass(frozen=True)
class DicpConfig:
    precision_check: bool = False
    cache: bool = True
    cache_dir: Path = Path("~/.cache/dicp").expanduser()
    shape_check: bool = False
    report: bool = False
    strict: bool = False
    ort_threads: int = 0  # 0: torch.get_num_threads()
    ort_spin: bool = False


def parse_config(env: Mapping[str, str] | None = None) -> DicpConfig:
    """The configuration from ``env`` (default: ``os.environ``)."""
    env = os.environ if env is None else env
    threads_text = env.get("DICP_ORT_THREADS", "").strip()
    try:
        threads = int(threads_text) if threads_text else 0
        if threads < 0:
            raise ConfigError
    except ValueError:
        raise ConfigError(f"DICP_ORT_THREADS={threads_text!r}: expected a thread count >= 0") from None
    cache_dir = env.get("DICP_CACHE_DIR", "").strip()
    return DicpConfig(
        precision_check=env_flag("DICP_PRECISION_CHECK", env=env),
        cache=env_flag("DICP_CACHE", default=True, env=env),
        cache_dir=Path(folder_path(os.path.expanduser(cache_dir), "DICP_CACHE_DIR")) if cache_dir
        else DicpConfig.cache_dir,
        shape_check=env_flag("DICP_SHAPE_CHECK", env=env),
        report=env_flag("DICP_REPORT", env=env),
        strict=env_flag("DICP_STRICT", env=env),
        ort_threads=threads,
        ort_spin=env_flag("DICP_ORT_SPIN", env=env),
    )


_CONFIG: DicpConfig | None = None


def dicp_config() -> DicpConfig:
    """The process's configuration, read from the environment on first use."""
    global _CONFIG
    if _CONFIG is None:
        _CONFIG = parse_config()
    return _CONFIG


def reset_config(config: DicpConfig | None = None) -> None:
    """Replace the configuration (``None``: read the environment again at next use); for tests and tools."""
    global _CONFIG
    _CONFIG = config
