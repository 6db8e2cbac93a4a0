"""Per-device conformance config (``--device-config FILE``, YAML): skips with reasons and tolerance overrides.

.. code-block:: yaml

    skip:
      - function: diopiMul            # a DIOPI name or a whole-name regular expression (required)
        dtype: [float16, bfloat16]    # optional: one dtype or a list
        shape: [0, 3]                 # optional: some input has this shape; or "empty" / "scalar"
        params: {alpha: 2}            # optional: the case's params have these values
        layout: noncontiguous         # optional
        reason: no float16 multiply on this chip   # required
    tolerance:
      - function: diopiSoftmax        # name or regex (required)
        dtype: float16                # optional (every floating dtype when left out)
        atol: 1.0e-3                  # required
        rtol: 1.0e-3                  # required

A malformed file raises :class:`DeviceConfigError` naming the file, the entry (``skip[2]``) and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diopi.case_format import dtype_from_name
from diopi.yaml_config import load_yaml_mapping


class DeviceConfigError(ValueError):
    """A device config that cannot be used; the message names the file, the entry and the key."""


@dataclass(frozen=True)
class Rule:
    """One ``skip`` or ``tolerance`` entry."""

    function: re.Pattern[str]
    dtypes: tuple[str, ...] = ()
    shape: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    layout: str | None = None
    reason: str = ""
    atol: float = 0.0
    rtol: float = 0.0

    def matches(self, case: dict[str, Any]) -> bool:
        """Whether the ``conformance`` section of a case record is one this rule names."""
        if not self.function.fullmatch(str(case.get("function", ""))):
            return False
        if self.dtypes and case.get("dtype") not in self.dtypes:
            return False
        if self.layout is not None and case.get("layout") != self.layout:
            return False
        if self.shape is not None:
            shapes = [list(s) for s in case.get("shapes", [])]
            if self.shape == "empty":
                ok = any(0 in s for s in shapes)
            elif self.shape == "scalar":
                ok = any(len(s) == 0 for s in shapes)
            else:
                ok = list(self.shape) in shapes
            if not ok:
                return False
        params = case.get("params", {})
        return all(name in params and params[name] == value for name, value in self.params.items())


@dataclass
class DeviceConfig:
    """The skips and tolerance overrides of one device (empty: nothing skipped, no override)."""

    skips: list[Rule] = field(default_factory=list)
    tolerances: list[Rule] = field(default_factory=list)
    source: str = ""

    def skip_reason(self, case: dict[str, Any]) -> str | None:
        """The reason of the first skip entry matching ``case`` (its ``conformance`` section), or None."""
        for rule in self.skips:
            if rule.matches(case):
                return rule.reason
        return None

    def tolerance(self, case: dict[str, Any]) -> tuple[float, float] | None:
        """``(atol, rtol)`` of the last tolerance entry matching ``case``, or None."""
        found = None
        for rule in self.tolerances:
            if rule.matches(case):
                found = (rule.atol, rule.rtol)
        return found


_SKIP_KEYS = {"function", "dtype", "shape", "params", "layout", "reason"}
_TOLERANCE_KEYS = {"function", "dtype", "shape", "params", "layout", "atol", "rtol"}


def _rule(path: str, where: str, entry: Any, allowed: set[str], required: tuple[str, ...]) -> Rule:
    def bad(key: str, message: str) -> DeviceConfigError:
        return DeviceConfigError(f"{path}: {where}: {key}: {message}")

    if not isinstance(entry, dict):
        raise DeviceConfigError(f"{path}: {where}: expected a mapping with keys {sorted(allowed)}, got {entry!r}")
    for key in entry:
        if key not in allowed:
            raise bad(str(key), f"unknown key (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if key not in entry or entry[key] in (None, ""):
            raise bad(key, "missing (required)")
    try:
        function = re.compile(str(entry["function"]))
    except re.error as exc:
        raise bad("function", f"not a regular expression ({exc})") from None
    dtypes = entry.get("dtype", [])
    dtypes = [dtypes] if isinstance(dtypes, str) else dtypes
    if not isinstance(dtypes, list):
        raise bad("dtype", f"expected a dtype name or a list of them, got {dtypes!r}")
    for name in dtypes:
        try:
            dtype_from_name(str(name))
        except ValueError:
            raise bad("dtype", f"unknown dtype {name!r}") from None
    shape = entry.get("shape")
    if shape is not None and shape not in ("empty", "scalar") and not (
            isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise bad("shape", f"expected a list of sizes, 'empty' or 'scalar', got {shape!r}")
    params = entry.get("params", {})
    if not isinstance(params, dict):
        raise bad("params", f"expected a mapping of parameter values, got {params!r}")
    layout = entry.get("layout")
    if layout is not None and layout not in ("contiguous", "noncontiguous", "offset"):
        raise bad("layout", f"expected contiguous, noncontiguous or offset, got {layout!r}")
    tol = {}
    for key in ("atol", "rtol"):
        if key in allowed:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise bad(key, f"expected a non-negative number, got {value!r}")
            tol[key] = float(value)
    reason = entry.get("reason", "")
    if "reason" in allowed and not isinstance(reason, str):
        raise bad("reason", f"expected text, got {reason!r}")
    return Rule(function, tuple(str(d) for d in dtypes), shape, dict(params), layout, reason, **tol)


def load_device_config(path: str | Path) -> DeviceConfig:
    """Read and check a device config file."""
    path = str(path)
    doc = load_yaml_mapping(path, what="device config", sections=("skip", "tolerance"), error=DeviceConfigError)
    config = DeviceConfig(source=path)
    for section, allowed, required, target in (
            ("skip", _SKIP_KEYS, ("function", "reason"), config.skips),
            ("tolerance", _TOLERANCE_KEYS, ("function", "atol", "rtol"), config.tolerances)):
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise DeviceConfigError(f"{path}: {section}: expected a list of entries")
        for i, entry in enumerate(entries):
            target.append(_rule(path, f"{section}[{i}]", entry, allowed, required))
    return config
