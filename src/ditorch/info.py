"""``ditorch info``: what ditorch found and what it does, in a few plain-text lines."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ditorch import __version__, config
from ditorch.adapters import Adapter
from ditorch.detect import ACTIVE, FAILED, Detection


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001  (a plugin without this query: say less, do not fail)
        return default


def device_lines(adapter: Adapter | None) -> list[str]:
    """One line per group of identical devices: ``<type>:<first>[-<last>]  <name>  <memory>``."""
    if adapter is None:
        return []
    module = adapter.device_module()
    groups: list[tuple[int, int, str]] = []  # first index, last index, description
    for index in range(_try(module.device_count, 0)):
        name = _try(lambda i=index: module.get_device_name(i), adapter.device_type)
        memory = getattr(_try(lambda i=index: module.get_device_properties(i)), "total_memory", None)
        text = f"{name}  {_gib(memory)}" if memory else str(name)
        if groups and groups[-1][2] == text:
            groups[-1] = (groups[-1][0], index, text)
        else:
            groups.append((index, index, text))
    return [
        f"{adapter.device_type}:{first}" + (f"-{last}" if last > first else "") + f"  {text}"
        for first, last, text in groups
    ]


def lines(detection: Detection, mocked: bool, env: dict[str, str] | None = None) -> list[str]:
    adapter = detection.adapter
    settings = config.DitorchConfig.from_env(env)
    out = [f"ditorch {__version__}  torch {torch.__version__}"]
    if adapter is None:
        out.append("framework: torch (cpu)" + ("  [DITORCH_VENDOR=cpu]" if detection.forced else ""))
    else:
        forced = "  [DITORCH_VENDOR]" if detection.forced else ""
        out.append(f"framework: {adapter.framework} {adapter.version()} ({adapter.describe()}){forced}")
    count = _try(adapter.device_module().device_count, 0) if adapter else 0
    out.append(f"devices: {count}" + ("" if adapter else f" accelerators; cpu with {os.cpu_count() or 1} cores"))
    out += [f"  {line}" for line in device_lines(adapter)]
    if adapter is not None:
        if mocked:
            mocking = f"on (cuda -> {adapter.device_type}, nccl -> {adapter.dist_backend})"
        elif adapter.is_native and adapter.device_type == "cuda":
            mocking = "off (native cuda)"
        elif settings.disable_mock:
            mocking = "off (DITORCH_DISABLE_MOCK=1)"
        else:
            mocking = "off (ditorch.mocking not installed)"
        out.append(f"mocking: {mocking}")
    out.append("adapters:")
    errors = {f.name: f.error for f in detection.failures}
    for a in detection.adapters:
        status = detection.status.get(a.name, "")
        if a.name in errors and status != FAILED:
            status = f"{status}; {FAILED}" if status else FAILED
        mark = "*" if status == ACTIVE else " "
        out.append(f" {mark}{a.name:<6} {a.framework:<11} {a.priority:>3}  {status}")
        if a.name in errors:
            out.append(f"         {errors[a.name]}")
    known = {a.name for a in detection.adapters}
    for name, error in errors.items():  # entry points that failed to load, with no adapter of that name
        if name not in known:
            out.append(f"  {name:<6} {'?':<11} {'':>3}  {FAILED}: {error}")
    switches = config.switches_in_force(env)
    out.append("switches:" + ("" if switches else " none (DITORCH_* unset)"))
    out += [f"  {name}={value}  ({meaning})" for name, value, meaning in switches]
    return out


def run() -> int:
    """Print the report for this process's activation (``import ditorch`` already ran)."""
    import ditorch

    print("\n".join(lines(ditorch.detection, ditorch.mocked)))
    return 0
