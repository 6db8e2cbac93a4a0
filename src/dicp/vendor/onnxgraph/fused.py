"""onnxgraph's fused patterns: which of dicp's pattern rewrites the vendor runs, and the ONNX lowering of the
fused operators they produce (filled in by the fused-patterns work; see docs/dicp.md "Fused patterns")."""

from __future__ import annotations

from dicp.dynamo_bridge.vendor import GraphPass


def rewrite_passes() -> list[GraphPass]:
    """The pattern-rewriting passes of the onnxgraph vendor, in order."""
    return []
