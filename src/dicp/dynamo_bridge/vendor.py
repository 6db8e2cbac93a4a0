"""What a vendor gives the bridge: :class:`Vendor`.

The bridge (``dicp.dynamo_bridge.compile_fx``) takes the ATen graphs of AOTAutograd, runs the vendor's passes,
cuts the graph into *vendor islands* (nodes the vendor's registry converts) and *eager islands* (the rest, run by
PyTorch), and hands each vendor island to the vendor as a small ``torch.fx.GraphModule``:

- its placeholders are tensors or symbolic integers (``node.meta["val"]`` is a ``FakeTensor``, a ``SymInt`` or
  an ``int``); every other node is a ``call_function`` whose target the registry converts, with
  ``node.meta["val"]`` holding its fake result (shape with symbols, dtype, device); one ``output`` node returns a
  flat tuple of tensors;
- :attr:`Vendor.compile` turns it into an *artifact*: bytes (the vendor IR or executable, serialized), which the
  bridge caches on disk keyed by the graph, its input metadata, :meth:`ConversionRegistry.version` and
  :attr:`Vendor.versions`;
- :attr:`Vendor.load` turns an artifact (fresh or from the cache) back into a runner: called with the island's
  real inputs (tensors on the device, plain ints for symbolic sizes) in placeholder order, it returns the list of
  output tensors, on the devices and with the dtypes and shapes the graph's metadata says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from .conversion import ConversionRegistry

__all__ = ["GraphPass", "Vendor"]

#: A graph pass: rewrites a GraphModule in place and returns how many rewrites it made.
GraphPass = Callable[[torch.fx.GraphModule], int]


@dataclasses.dataclass
class Vendor:
    """A vendor graph compiler, as the bridge sees it."""

    #: The backend name (``torch.compile(model, backend=name)``), also the compile cache's folder.
    name: str
    conversions: ConversionRegistry
    #: Vendor island -> artifact bytes (conversion, codegen, the vendor compiler).
    compile: Callable[[torch.fx.GraphModule], bytes]
    #: (artifact, the island it was built from) -> runner(*inputs) -> list of output tensors.
    load: Callable[[bytes, torch.fx.GraphModule], Callable[..., list[torch.Tensor]]]
    #: AOTAutograd decomposition table (ATen overload -> Python decomposition).
    decompositions: dict[Any, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    #: Pattern-rewriting passes on the whole ATen graph, before partitioning (fused ops).
    rewrite_passes: list[GraphPass] = dataclasses.field(default_factory=list)
    #: Layout passes (transposes folded, formats changed), after the rewrites.
    layout_passes: list[GraphPass] = dataclasses.field(default_factory=list)
    #: Versions of the vendor's compiler and runtime (e.g. ``{"onnx": ..., "onnxruntime": ...}``): cache key.
    versions: Callable[[], dict[str, str]] = dict
    #: Optional: the vendor's own shape and dtype inference on an artifact, compared with the graph's fake
    #: tensors when ``DICP_SHAPE_CHECK=1``; returns one line per disagreement (empty: they agree).
    check_shapes: Callable[[bytes, torch.fx.GraphModule], list[str]] | None = None
