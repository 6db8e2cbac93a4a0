"""Read a module dump (format ``ditorch.module_dump/1``, written by :class:`module_tools.ModuleDump`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from diopi import case_format as cf

__all__ = ["FORMAT", "Dump", "DumpError", "load_dump"]

#: The format name a module dump's ``index.json`` carries (written by :mod:`module_tools.dump`, checked here).
FORMAT = "ditorch.module_dump/1"

_REQUIRED = ("format", "stats_only", "modules", "forward", "backward")


class DumpError(ValueError):
    """A dump that cannot be read; the message names the file at fault."""


@dataclass
class Dump:
    """One rank's dump: the index's fields, and :meth:`tensors` to load an entry's tensors."""

    path: Path
    index: dict[str, Any]
    forward: list[dict[str, Any]] = field(default_factory=list)
    backward: list[dict[str, Any]] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)

    @property
    def stats_only(self) -> bool:
        return bool(self.index.get("stats_only"))

    @property
    def steps(self) -> list[int]:
        return list(self.index.get("steps", []))

    @property
    def root(self) -> str:
        return str(self.index.get("root", ""))

    @property
    def fixed_input(self) -> list[dict[str, Any]]:
        """The fixed-input replay entries (``ModuleDump(..., fixed_input=REF)``), empty for an ordinary dump."""
        value = self.index.get("fixed_input")
        return list(value.get("entries", [])) if isinstance(value, dict) else []

    @property
    def fixed_input_failures(self) -> list[dict[str, Any]]:
        """The calls whose fixed-input replay raised (module, step, call, error)."""
        value = self.index.get("fixed_input")
        return list(value.get("failed", [])) if isinstance(value, dict) else []

    @property
    def fixed_input_reference(self) -> str | None:
        """The reference dump the fixed-input replay read, or None."""
        value = self.index.get("fixed_input")
        return str(value.get("reference")) if isinstance(value, dict) else None

    def tensors(self, entry: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The host tensors of ``entry`` (full mode); :class:`DumpError` for a stats-only dump or a missing or
        damaged tensor file (named)."""
        if entry.get("dir") is None:
            raise DumpError(f"{self.path / 'index.json'}: entry {entry.get('module')!r} step {entry.get('step')} "
                            f"call {entry.get('call')} has no tensor files (statistics-only dump)")
        folder = self.path / entry["dir"]
        file = folder / cf.TENSORS_FILE
        if not file.is_file():
            raise DumpError(f"{file}: tensor file missing")
        if (folder / cf.CASE_FILE).is_file():  # a forward call: a case, its tensors by the dump's names
            try:
                case = cf.load_case(folder)
                metas, names = case.record["tensors"], case.record["module"]["names"]
                return {name: cf.rebuild_tensor(metas[key], case.data[key], "cpu") for name, key in names.items()}
            except (cf.CaseFormatError, KeyError, TypeError) as exc:
                raise DumpError(f"{folder / cf.CASE_FILE}: not a readable module call case ({exc})") from None
        try:
            return cf.load_tensors(file)
        except cf.CaseFormatError as exc:
            raise DumpError(str(exc)) from None


def _index_file(path: Path) -> Path:
    if (path / "index.json").is_file():
        return path / "index.json"
    if (path / "rank0" / "index.json").is_file():
        return path / "rank0" / "index.json"
    if path.is_file() and path.name == "index.json":
        return path
    raise DumpError(f"{path / 'index.json'}: no module dump here (neither {path}/index.json nor "
                    f"{path}/rank0/index.json exists)")


def load_dump(path: str | Path) -> Dump:
    """The dump at ``path`` (the dump folder, read as rank 0, or one ``rank<r>`` folder); :class:`DumpError`
    names a missing or damaged index."""
    index_file = _index_file(Path(path))
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DumpError(f"{index_file}: damaged module dump index ({exc})") from None
    if not isinstance(index, dict) or any(key not in index for key in _REQUIRED):
        raise DumpError(f"{index_file}: not a module dump index (expected the keys {', '.join(_REQUIRED)})")
    if index["format"] != FORMAT:
        raise DumpError(f"{index_file}: unknown format {index['format']!r} (expected {FORMAT!r})")
    if not isinstance(index["forward"], list) or not isinstance(index["backward"], list):
        raise DumpError(f"{index_file}: damaged module dump index (forward/backward are not lists)")
    return Dump(index_file.parent, index, index["forward"], index["backward"], dict(index["modules"]))
