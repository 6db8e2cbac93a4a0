"""The compile cache: vendor artifacts on disk, reused by later compiles and other processes.

Key: sha256 of the island's canonical listing (operators, arguments, each node's dtype/shape/stride with
symbols as text), its placeholders' metadata (dtype, shape, stride, device type; symbolic sizes by name), the
vendor's name, :meth:`ConversionRegistry.version`, :attr:`Vendor.versions` and ``torch.__version__``.
An entry is ``<cache_dir>/<vendor>/<key>.bin`` (the artifact) and ``<key>.json`` (what the key was made of and
the artifact's sha256), both written atomically, the JSON last. An entry whose JSON is unreadable, whose
artifact is missing, truncated or has another checksum, is reported as corrupt and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from diopi.case_format import atomic_open, write_json

from .conversion import stable_repr
from .partition import op_name
from .vendor import Vendor

__all__ = ["CompileCache", "cache_key", "describe_value", "graph_listing"]

#: Bumped when the key's recipe or the entry layout changes.
FORMAT = 2


def describe_value(val: Any) -> str:
    """One line for a node's value: ``float32[s0, 4] stride (4, 1) cpu``, ``SymInt s0``, ``int 3``."""
    if isinstance(val, torch.Tensor):
        shape = ", ".join(str(d) for d in val.shape)
        stride = ", ".join(str(s) for s in val.stride()) if val.layout == torch.strided else "-"
        dtype = str(val.dtype).removeprefix("torch.")
        return f"{dtype}[{shape}] stride ({stride}) {val.device.type}"
    if isinstance(val, (tuple, list)):
        return "(" + "; ".join(describe_value(v) for v in val) + ")"
    if isinstance(val, torch.SymInt):
        return f"SymInt {val}"
    return f"{type(val).__name__} {stable_repr(val)}"


def _arg_text(arg: Any, index: dict[torch.fx.Node, int]) -> str:
    if isinstance(arg, torch.fx.Node):
        return f"%{index[arg]}"
    if isinstance(arg, (tuple, list)):
        inner = ", ".join(_arg_text(a, index) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner})"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}={_arg_text(v, index)}" for k, v in arg.items()) + "}"
    if isinstance(arg, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)) or callable(arg):
        return op_name(arg)  # never a repr with an address: the key must be the same in every process
    return stable_repr(arg)


def graph_listing(gm: torch.fx.GraphModule) -> str:
    """A canonical text of ``gm``: one line per node, nodes by position (names do not matter), targets by
    operator name, every node's value described by :func:`describe_value`."""
    index: dict[torch.fx.Node, int] = {}
    lines = []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        target = op_name(node.target) if node.op == "call_function" else str(node.target)
        if node.op in ("placeholder", "get_attr"):
            target = node.op
        args = _arg_text(node.args, index)
        kwargs = _arg_text(node.kwargs, index) if node.kwargs else ""
        lines.append(f"%{i} = {node.op} {target}{args}{kwargs} : {describe_value(node.meta.get('val'))}")
    return "\n".join(lines)


def cache_key(vendor: Vendor, gm: torch.fx.GraphModule) -> tuple[str, dict[str, Any]]:
    """``(key, what it was made of)`` for the island ``gm`` of ``vendor``."""
    inputs = {
        "format": FORMAT,
        "vendor": vendor.name,
        "conversions": vendor.conversions.version(),
        "versions": {str(k): str(v) for k, v in sorted(vendor.versions().items())},
        "torch": torch.__version__,
        "placeholders": [describe_value(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"],
        "graph_sha256": hashlib.sha256(graph_listing(gm).encode()).hexdigest(),
    }
    text = json.dumps(inputs, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest(), inputs


class CompileCache:
    """The artifacts of one vendor under ``<root>/<vendor>/``."""

    def __init__(self, root: Path, vendor: str) -> None:
        self.folder = Path(root) / vendor

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.folder / f"{key}.bin", self.folder / f"{key}.json"

    def lookup(self, key: str) -> tuple[str, bytes | None]:
        """``("hit", artifact)``, ``("miss", None)`` (no entry) or ``("corrupt", None)`` (an entry that must
        be rebuilt: unreadable JSON, missing or truncated artifact, another checksum)."""
        artifact_path, meta_path = self._paths(key)
        if not meta_path.exists():
            return "miss", None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            artifact = artifact_path.read_bytes()
            expected = meta["artifact_sha256"]
            size = meta["artifact_bytes"]
        except (OSError, ValueError, KeyError, TypeError):
            return "corrupt", None
        if len(artifact) != size or hashlib.sha256(artifact).hexdigest() != expected:
            return "corrupt", None
        return "hit", artifact

    def store(self, key: str, artifact: bytes, key_inputs: dict[str, Any]) -> None:
        """Write the artifact, then its JSON (each atomically): a reader sees a whole entry or none."""
        if not isinstance(artifact, (bytes, bytearray)):
            raise TypeError(f"dicp: a vendor's compile must return bytes, got {type(artifact).__name__}")
        self.folder.mkdir(parents=True, exist_ok=True)
        artifact_path, meta_path = self._paths(key)
        with atomic_open(artifact_path, "wb") as f:
            f.write(artifact)
        write_json(meta_path, {"key": key, "inputs": key_inputs, "artifact_bytes": len(artifact),
                               "artifact_sha256": hashlib.sha256(artifact).hexdigest()})
