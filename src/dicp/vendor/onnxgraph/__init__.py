"""The ``onnxgraph`` vendor: ATen -> ONNX -> ONNX Runtime (see docs/dicp.md)."""

from __future__ import annotations

from typing import Any


def onnxgraph(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
    """The dynamo backend (``torch.compile(model, backend="onnxgraph")``)."""
    raise NotImplementedError("dicp onnxgraph: being built")
