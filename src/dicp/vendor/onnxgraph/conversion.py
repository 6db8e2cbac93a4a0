"""ATen -> ONNX conversions of the ``onnxgraph`` vendor: the registry and the converter contract.

Registry::

    from dicp.vendor.onnxgraph.conversion import register_conversion

    @register_conversion(torch.ops.aten.rsqrt.default)
    def rsqrt(ctx, x):
        return ctx.emit("Reciprocal", [ctx.emit("Sqrt", [x])])

Contract (what codegen, :mod:`dicp.vendor.onnxgraph.codegen`, does with a converter):

- A converter is called as ``fn(ctx, *args, **kwargs)`` with the fx node's arguments, where every ``fx.Node`` is
  replaced by the name (a ``str``) of its ONNX value, a node producing a tuple (``native_layer_norm``) by the list
  of its names (``operator.getitem`` picks one); constants stay Python values (ints, floats, bools, dtypes,
  lists, None). A symbolic size (SymInt) arrives as the name of a 0-d int64 ONNX value.
- It returns the name of its result, or a list of names for an operator with several results.
- ``ctx`` (:class:`~dicp.vendor.onnxgraph.codegen.ConversionContext`) offers:

  - ``ctx.node``: the fx node (``ctx.node.meta["val"]`` its fake result; ``ctx.out`` is the same);
    ``ctx.opset``: the ONNX opset (18);
  - ``ctx.emit(op_type, inputs, outputs=1, *, domain="", dtype=None, **attrs) -> name | list[name]``: append an
    ONNX node (``None`` for an omitted optional input; ``dtype`` records the outputs' dtype);
  - ``ctx.const(value, dtype) -> name``: an initializer; ``ctx.scalar(value_or_name, dtype)``: a 0-d value;
  - ``ctx.cast(name, dtype) -> name``: no node when already that dtype;
  - ``ctx.shape_of(name, start=None, end=None) -> name``: the run-time shape (1-D int64);
  - ``ctx.sizes([int | name, ...]) -> name``: a 1-D int64 tensor from ints and SymInt names (view/expand sizes);
  - ``ctx.dtype_of(name)`` (dtype inside the graph: float16/bfloat16 values are float32),
    ``ctx.torch_dtype_of(name)``, ``ctx.rank_of(name)``, ``ctx.static_shape(name)`` (None if symbolic),
    ``ctx.val_of(name)`` (the fake value, when known).

- A converter never calls ``int()``, ``bool()`` or comparisons on a SymInt (that adds guards): a symbolic size is
  an ONNX value, or is read from a shape at run time. Ranks are static; ``type(d) is int`` tells a static size.
- float16/bfloat16 tensors are float32 inside the graph (codegen casts at the inputs and outputs); converters
  compute in ``compute_dtype(meta dtype)``, i.e. use ``ctx.cast(x, out_dtype)`` and ``ctx.const(v, out_dtype)``.
- ``supports=`` (a ``node -> reason | None`` function) rejects forms a converter does not handle, so that node
  runs in an eager island; :func:`dtype_supported` rejects dtypes ONNX Runtime lacks.
- Random operators (dropout, rand*, bernoulli) are never converted: they stay eager and keep torch's RNG.

The converters live in ``convert_math`` (elementwise, reductions, creation), ``convert_shape`` (views,
indexing), ``convert_nn`` (matmul, normalization, losses, convolution, pooling) and ``convert_attention``;
``fused`` adds the fused operators of the pattern rewrites and ``convert_dlinfer`` dlinfer's operators. They import
the table and its helpers from ``convert_common``; importing this module registers them all.

Complex values are float pairs in a trailing dimension inside the graph (see ``codegen``); ``convert_complex``
converts the complex nodes of the operators it registers with ``register_complex`` (views, ``polar``, ``mul``,
``add``, conjugates, sums, shape operators), which dispatches a node to it when the node reads or makes a complex
tensor and to the operator's float/int converter otherwise. :func:`dtype_supported` rejects complex dtypes for
every other operator.
"""

from __future__ import annotations

from . import convert_attention, convert_complex, convert_dlinfer, convert_math, convert_nn, convert_shape  # noqa: F401
from .convert_common import (
    INT64_MAX,
    INT64_MIN,
    conversions,
    dtype_supported,
    no_float64,
    norm_dim,
    register,
    register_conversion,
)

__all__ = ["INT64_MAX", "INT64_MIN", "conversions", "dtype_supported", "no_float64", "norm_dim", "register",
           "register_conversion"]
