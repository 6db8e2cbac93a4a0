"""Codegen of the ``onnxgraph`` vendor: a vendor island (``torch.fx.GraphModule``) -> ``onnx.ModelProto`` bytes.

Placeholders become graph inputs (tensors with their dtype and shape, a symbolic dimension as a ``dim_param``
named by the SymInt's text; a SymInt or int placeholder as a 0-d int64 input); every ``call_function`` node is
handed to its converter (see :mod:`dicp.vendor.onnxgraph.conversion` for the contract) through a
:class:`ConversionContext`; the outputs are typed from ``meta["val"]``.

float16 and bfloat16 values are computed in float32 (ORT's CPU kernels lack most half-precision kernels): a
``Cast`` follows each such input and precedes each such output; an explicit cast to a half type inside the graph
rounds through it (``Cast`` there and back), so results round like eager.

A complex value (complex64/complex128) of logical shape ``S`` is, inside the graph, a float32/float64 value of
shape ``S + [2]`` (real and imaginary parts in a trailing dimension): inputs and outputs of complex dtype are
declared so, the runner (:func:`dicp.vendor.onnxgraph.runtime.load`) feeds ``torch.view_as_real`` of a complex
input and returns ``torch.view_as_complex`` of such an output. ``val_of``/``rank_of``/``static_shape`` of a
complex value give its logical (complex) fake value, rank and sizes; ``dtype_of`` its float part dtype.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from dicp.dynamo_bridge.conversion import ConversionRegistry, _name

__all__ = ["COMPLEX_PARTS", "DEFAULT_OPSET", "ConversionContext", "ConversionError", "build_model", "compile_island",
           "graph_dtype", "onnx_dtype"]

DEFAULT_OPSET = 23
#: Model metadata key: JSON {fx node name: ONNX value name} (the shape check compares them).
VALUES_PROP = "dicp.values"

_ONNX_DTYPES: dict[torch.dtype, int] = {
    torch.float32: TensorProto.FLOAT,
    torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.int64: TensorProto.INT64,
    torch.int32: TensorProto.INT32,
    torch.int16: TensorProto.INT16,
    torch.int8: TensorProto.INT8,
    torch.uint8: TensorProto.UINT8,
    torch.bool: TensorProto.BOOL,
}
_NUMPY_DTYPES: dict[torch.dtype, Any] = {
    torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64, torch.int32: np.int32,
    torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
}
#: dtypes computed in another dtype inside the ONNX graph (ORT's CPU kernels lack them).
COMPUTE_DTYPE: dict[torch.dtype, torch.dtype] = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
#: complex dtypes -> the float dtype of their (real, imag) pairs inside the ONNX graph (a trailing dimension of 2).
COMPLEX_PARTS: dict[torch.dtype, torch.dtype] = {torch.complex64: torch.float32, torch.complex128: torch.float64}


class ConversionError(RuntimeError):
    """A converter failed; the message names the fx node and its ATen operator."""


def onnx_dtype(dtype: torch.dtype) -> int:
    """The ONNX element type of torch ``dtype``; a dtype ONNX lacks raises ``TypeError``."""
    try:
        return _ONNX_DTYPES[dtype]
    except KeyError:
        raise TypeError(f"onnxgraph: no ONNX element type for {dtype}") from None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value of torch ``dtype`` has inside the ONNX graph (float16/bfloat16 -> float32)."""
    return COMPUTE_DTYPE.get(dtype, dtype)


def graph_dtype(dtype: torch.dtype) -> torch.dtype:
    """The element dtype of a value of torch ``dtype`` inside the ONNX graph: :func:`compute_dtype`, and the
    float dtype of the (real, imag) pairs for a complex dtype."""
    return COMPLEX_PARTS.get(dtype) or compute_dtype(dtype)


def _value_info(name: str, val: torch.Tensor) -> onnx.ValueInfoProto:
    """A graph input/output of fake value ``val``: a complex value is its float pairs (a trailing 2)."""
    part = COMPLEX_PARTS.get(val.dtype)
    if part is not None:
        return helper.make_tensor_value_info(name, onnx_dtype(part), [*_dims(val), 2])
    return helper.make_tensor_value_info(name, onnx_dtype(val.dtype), _dims(val))


def _is_tensor(val: Any) -> bool:
    return isinstance(val, torch.Tensor)


def _dims(val: torch.Tensor) -> list[int | str]:
    return [d if isinstance(d, int) else str(d) for d in val.shape]


class ConversionContext:
    """What a converter gets as ``ctx`` (the contract is in :mod:`dicp.vendor.onnxgraph.conversion`)."""

    def __init__(self, opset: int = DEFAULT_OPSET) -> None:
        self.opset = opset
        #: The fx node being converted (``node.meta["val"]`` is its fake result).
        self.node: torch.fx.Node | None = None
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._dtypes: dict[str, torch.dtype] = {}
        self._vals: dict[str, Any] = {}
        self._consts: dict[tuple[Any, ...], str] = {}
        self._like: dict[str, str] = {}  # value -> a value of the same shape (casts)
        self._count = 0

    # -- names and metadata ---------------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        """A new, unused value name."""
        self._count += 1
        base = self.node.name if self.node is not None else "g"
        return f"{base}__{hint}{self._count}"

    @property
    def out(self) -> Any:
        """The fake result of the node being converted (``ctx.node.meta["val"]``)."""
        return self.node.meta.get("val") if self.node is not None else None

    def set_val(self, name: str, val: Any) -> None:
        """Record the fake value (and so the dtype) of ONNX value ``name``."""
        self._vals[name] = val
        if _is_tensor(val):
            self._dtypes[name] = graph_dtype(val.dtype)
        elif isinstance(val, (int, torch.SymInt)):
            self._dtypes[name] = torch.int64

    def val_of(self, name: str) -> Any:
        """The fake value (``FakeTensor`` / ``SymInt``) behind value ``name`` when known, else None."""
        return self._vals.get(name)

    def dtype_of(self, name: str) -> torch.dtype:
        """The dtype value ``name`` has inside the ONNX graph (float16/bfloat16 values are float32)."""
        try:
            return self._dtypes[name]
        except KeyError:
            raise ConversionError(f"onnxgraph: dtype of value {name!r} unknown") from None

    def torch_dtype_of(self, name: str) -> torch.dtype:
        """The dtype eager PyTorch gives value ``name`` (from ``meta["val"]``; float16 stays float16)."""
        val = self._vals.get(name)
        return val.dtype if _is_tensor(val) else self.dtype_of(name)

    def _shape_val(self, name: str) -> Any:
        while name not in self._vals and name in self._like:
            name = self._like[name]
        return self._vals.get(name)

    def rank_of(self, name: str) -> int:
        """The rank of tensor value ``name`` (ranks are static even when sizes are symbolic)."""
        val = self._shape_val(name)
        if _is_tensor(val):
            return val.dim()
        if name in self._dtypes:
            return 0
        raise ConversionError(f"onnxgraph: rank of value {name!r} unknown")

    def static_shape(self, name: str) -> list[int] | None:
        """The sizes of value ``name`` when all are static ints, else None (no guard is added)."""
        val = self._shape_val(name)
        if not _is_tensor(val):
            return [] if name in self._dtypes else None
        dims = list(val.shape)
        return dims if all(type(d) is int for d in dims) else None

    # -- emitting -------------------------------------------------------------------------------------------
    def emit(self, op_type: str, inputs: Sequence[str | None], outputs: int = 1, *, domain: str = "",
             dtype: torch.dtype | None = None, like: str | None = None, **attrs: Any) -> Any:
        """Append ONNX node ``op_type`` (``None`` in ``inputs``: an omitted optional input); return its output
        name, or a list of names when ``outputs`` > 1. ``dtype``: record the outputs' (compute) dtype; ``like``:
        a value whose shape the (first) output has."""
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        target = _name(self.node.target) if self.node is not None else "graph"
        node_name = f"{self.node.name if self.node is not None else 'graph'}/{target}/{len(self.nodes)}"
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, ["" if i is None else i for i in inputs], names,
                                           name=node_name, domain=domain or None, **attrs))
        if dtype is not None:
            for n in names:
                self._dtypes[n] = compute_dtype(dtype)
        if like is not None:
            self._like[names[0]] = like
        return names[0] if outputs == 1 else names

    def const(self, value: Any, dtype: torch.dtype) -> str:
        """An initializer holding ``value`` (a Python scalar, nested list, numpy array or CPU tensor) as
        ``dtype`` (its compute dtype: a float16 constant is stored as float32)."""
        dtype = compute_dtype(dtype)
        if isinstance(value, torch.Tensor):
            value = value.detach().to(dtype).numpy()
        array = np.asarray(value, dtype=_NUMPY_DTYPES[dtype])
        key = (array.tobytes(), array.shape, str(dtype))
        name = self._consts.get(key)
        if name is None:
            self._count += 1
            name = self._consts[key] = f"const__{self._count}"
            self.initializers.append(onnx.numpy_helper.from_array(array, name))
            self._dtypes[name] = dtype
        return name

    def cast(self, name: str, dtype: torch.dtype) -> str:
        """``name`` as ``dtype``'s compute dtype (no node when it already is). A cast to float16/bfloat16
        rounds through that type, as eager does."""
        target = compute_dtype(dtype)
        if self._dtypes.get(name) == target and (target == dtype or self.torch_dtype_of(name) == dtype):
            return name
        if target != dtype:  # round to the half type, compute in float32
            name = self.emit("Cast", [name], to=onnx_dtype(dtype), like=name)
        return self.emit("Cast", [name], to=onnx_dtype(target), dtype=target, like=name)

    def shape_of(self, name: str, start: int | None = None, end: int | None = None) -> str:
        """A 1-D int64 value: the run-time shape of ``name`` (``start``/``end`` slice it)."""
        return self.emit("Shape", [name], start=start, end=end, dtype=torch.int64)

    def sizes(self, values: Sequence[int | str]) -> str:
        """A 1-D int64 value from a list of Python ints and 0-d int64 value names (SymInt island inputs)."""
        if all(isinstance(v, int) for v in values):
            return self.const([int(v) for v in values], torch.int64)
        parts: list[str] = []
        ints: list[int] = []
        for v in values:
            if isinstance(v, int):
                ints.append(v)
                continue
            if ints:
                parts.append(self.const(ints, torch.int64))
                ints = []
            v = self.cast(v, torch.int64)
            parts.append(self.emit("Reshape", [v, self.const([1], torch.int64)], dtype=torch.int64)
                         if self.rank_of(v) == 0 else v)
        if ints:
            parts.append(self.const(ints, torch.int64))
        return parts[0] if len(parts) == 1 else self.emit("Concat", parts, axis=0, dtype=torch.int64)

    def scalar(self, value: int | float | bool | str, dtype: torch.dtype) -> str:
        """A 0-d value of ``dtype``: a constant for a Python number, a cast for a value name."""
        return self.cast(value, dtype) if isinstance(value, str) else self.const(value, dtype)


def _unwrap(arg: Any, env: dict[torch.fx.Node, Any]) -> Any:
    return torch.fx.node.map_arg(arg, lambda n: env[n])


def build_model(gm: torch.fx.GraphModule, registry: ConversionRegistry, opset: int = DEFAULT_OPSET,
                name: str = "island") -> onnx.ModelProto:
    """The ONNX model of vendor island ``gm``; a converter's failure raises :class:`ConversionError` naming the
    node and its operator."""
    ctx = ConversionContext(opset)
    env: dict[torch.fx.Node, Any] = {}
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    for node in gm.graph.nodes:
        ctx.node = None
        if node.op == "placeholder":
            val = node.meta.get("val")
            if _is_tensor(val):
                inputs.append(_value_info(node.name, val))
                ctx._dtypes[node.name] = COMPLEX_PARTS.get(val.dtype, val.dtype)
                ctx.node = node
                name = node.name
                if val.dtype in COMPUTE_DTYPE:
                    name = ctx.emit("Cast", [node.name], to=onnx_dtype(compute_dtype(val.dtype)))
                ctx.set_val(name, val)
                env[node] = name
            elif isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
                inputs.append(helper.make_tensor_value_info(node.name, TensorProto.INT64, []))
                ctx.set_val(node.name, val)
                env[node] = node.name
            elif isinstance(val, (float, torch.SymFloat)):
                inputs.append(helper.make_tensor_value_info(node.name, TensorProto.DOUBLE, []))
                ctx._dtypes[node.name] = torch.float64
                env[node] = node.name
            else:
                raise ConversionError(f"onnxgraph: placeholder {node.name}: unsupported value {type(val).__name__}")
        elif node.op == "call_function":
            ctx.node = node
            op = _name(node.target)
            conversion = registry.lookup(node.target)
            if conversion is None:
                raise ConversionError(f"onnxgraph: node {node.name}: no conversion for {op}")
            try:
                result = conversion.fn(ctx, *_unwrap(node.args, env), **_unwrap(node.kwargs, env))
            except ConversionError as exc:
                if node.name in str(exc):
                    raise
                raise ConversionError(f"onnxgraph: node {node.name} ({op}): {exc}") from exc
            except Exception as exc:
                raise ConversionError(f"onnxgraph: node {node.name} ({op}): {type(exc).__name__}: {exc}") from exc
            _record(ctx, result, node.meta.get("val"), node, op)
            env[node] = result
        elif node.op == "output":
            ctx.node = node
            results = node.args[0]
            results = results if isinstance(results, (list, tuple)) else (results,)
            produced = {value for n in ctx.nodes for value in n.output}
            for i, out in enumerate(results):
                if not isinstance(out, torch.fx.Node) or not _is_tensor(out.meta.get("val")):
                    raise ConversionError(f"onnxgraph: output {i} is not a tensor node: {out!r}")
                val = out.meta["val"]
                src = env[out]
                name = f"output__{i}"
                if val.dtype in COMPUTE_DTYPE:
                    ctx.nodes.append(helper.make_node("Cast", [src], [name], name=f"output/{i}",
                                                      to=onnx_dtype(val.dtype)))
                elif src in produced:  # the node's own value is the output: an Identity would copy it
                    name = src
                    produced.discard(src)  # a second output of the same value takes the Identity
                else:
                    ctx.nodes.append(helper.make_node("Identity", [src], [name], name=f"output/{i}"))
                outputs.append(_value_info(name, val))
        elif node.op == "get_attr":
            raise ConversionError(f"onnxgraph: node {node.name}: get_attr is not part of a vendor island")
    graph = helper.make_graph(ctx.nodes, name, inputs, outputs, initializer=ctx.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="dicp.onnxgraph", ir_version=10)
    values = {n.name: v for n, v in env.items() if n.op == "call_function" and isinstance(v, str)}
    helper.set_model_props(model, {VALUES_PROP: json.dumps(values, sort_keys=True)})
    return model


def _record(ctx: ConversionContext, result: Any, val: Any, node: torch.fx.Node, op: str) -> None:
    if isinstance(result, str):
        if _is_tensor(val) or isinstance(val, (int, torch.SymInt)):
            ctx.set_val(result, val)
    elif isinstance(result, (list, tuple)):
        vals = val if isinstance(val, (list, tuple)) else [None] * len(result)
        for r, v in zip(result, vals, strict=False):
            if isinstance(r, str) and v is not None:
                ctx.set_val(r, v)
    elif result is None and node.target is not operator.getitem:
        raise ConversionError(f"onnxgraph: node {node.name} ({op}): converter returned nothing")


def compile_island(gm: torch.fx.GraphModule, registry: ConversionRegistry, opset: int = DEFAULT_OPSET,
                   check: bool = False) -> bytes:
    """Vendor island -> serialized ONNX model; ``check``: run ``onnx.checker`` (debug)."""
    model = build_model(gm, registry, opset)
    if check:
        onnx.checker.check_model(model)
    return model.SerializeToString()
