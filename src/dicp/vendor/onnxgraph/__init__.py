"""The ``onnxgraph`` vendor: ATen -> ONNX (opset 23) -> ONNX Runtime (CPU execution provider).

``torch.compile(model, backend="onnxgraph")`` (entry point ``torch_dynamo_backends``) or :func:`onnxgraph`
directly; :func:`vendor` is the :class:`~dicp.dynamo_bridge.vendor.Vendor` the bridge drives (docs/dicp.md).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["onnxgraph", "vendor"]


def onnxgraph(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
    """The dynamo backend (``torch.compile(model, backend="onnxgraph")``)."""
    from dicp.dynamo_bridge.compile_fx import make_backend

    return make_backend(vendor())(gm, example_inputs, **kwargs)


@functools.cache
def vendor() -> Any:
    """The onnxgraph :class:`~dicp.dynamo_bridge.vendor.Vendor` (built once)."""
    from dicp.dynamo_bridge.passes import draws_apart, fold_transposes
    from dicp.dynamo_bridge.vendor import Vendor

    from . import fused
    from .conversion import conversions
    from .decompositions import decompositions
    from .runtime import check_shapes, compile_artifact, load, versions

    return Vendor(
        name="onnxgraph",
        conversions=conversions,
        compile=compile_artifact,
        load=load,
        decompositions=decompositions(),
        rewrite_passes=[draws_apart, *fused.rewrite_passes()],
        layout_passes=[fold_transposes],
        versions=versions,
        check_shapes=check_shapes,
    )
