"""The ``onnxgraph`` vendor's compiler and runtime: island -> ONNX bytes (:func:`compile_artifact`), bytes -> ONNX
Runtime session -> runner (:func:`load`), the versions in the cache key and the shape check.

Threads: each session has its own intra-op pool of ``DICP_ORT_THREADS`` threads (default
``torch.get_num_threads()``), one inter-op thread, and spinning off, so that idle ORT threads do not compete with
torch's. ORT's Python API can make sessions share global pools (``set_global_thread_pool_sizes`` before the
first session, then ``SessionOptions.use_per_session_threads = False``), but it exposes only the pools' sizes,
not their spin control, so global pools would spin; per-session pools without spinning are used instead.

Inputs: CPU tensors are bound without copies (DLPack); a dipu tensor whose vendor runtime declares
``host_storage`` is bound through its host storage (no copy), any other device tensor is copied to the host.
Outputs come back without copies (DLPack) and are moved to the device the graph's metadata names.
A complex input is fed as ``torch.view_as_real`` of it (its conjugate bit resolved), a complex output returned as
``torch.view_as_complex`` of the float pairs ORT made (no copy): see :mod:`dicp.vendor.onnxgraph.codegen`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.capi import _pybind_state as C

from dicp.config import dicp_config

from .codegen import _NUMPY_DTYPES as _CONST_NUMPY_DTYPES
from .codegen import DEFAULT_OPSET, compile_island, onnx_dtype
from .conversion import conversions

__all__ = ["OrtCompileError", "check_shapes", "compile_artifact", "load", "session_options", "versions"]


class OrtCompileError(RuntimeError):
    """ONNX Runtime rejected a model; the message names the fx node and ATen operator it complained about."""


def versions() -> dict[str, str]:
    """The compiler and runtime versions (part of the compile cache key), with a digest of the code generator's
    source: a changed codegen never reuses an artifact the old one built."""
    from dicp.dynamo_bridge.conversion import module_source_digest

    return {"onnx": onnx.__version__, "onnxruntime": ort.__version__, "opset": str(DEFAULT_OPSET),
            "codegen": module_source_digest(compile_island.__module__)[:16]}


def compile_artifact(gm: torch.fx.GraphModule) -> bytes:
    """Vendor island -> serialized ONNX model (``onnx.checker`` runs when ``DICP_SHAPE_CHECK=1``)."""
    return compile_island(gm, conversions, DEFAULT_OPSET, check=dicp_config().shape_check)


def session_options() -> ort.SessionOptions:
    """Options of every onnxgraph session: intra-op threads as configured, one inter-op thread, no spinning."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = dicp_config().ort_threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    spin = "1" if dicp_config().ort_spin else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    options.log_severity_level = 3
    return options


_NODE_NAME = re.compile(r"([A-Za-z_][\w.]*)/((?:aten|prims|dicp|[\w]+)\.[\w.]+|graph)/\d+")


def _describe_failure(exc: Exception, model: onnx.ModelProto | None) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    names = [n.name for n in model.graph.node] if model is not None else []
    hit = next((n for n in names if n and n in str(exc)), None)
    match = _NODE_NAME.match(hit) if hit else _NODE_NAME.search(str(exc))
    if match:
        return f"onnxgraph: ONNX Runtime rejected node {match.group(1)} ({match.group(2)}): {message}"
    return f"onnxgraph: ONNX Runtime rejected the model: {message}"


def create_session(artifact: bytes) -> ort.InferenceSession:
    """An ORT session (CPU execution provider) for ``artifact``; a failure raises :class:`OrtCompileError` naming
    the fx node and operator."""
    try:
        return ort.InferenceSession(artifact, session_options(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        try:
            model = onnx.load_from_string(artifact)
        except Exception:
            model = None
        raise OrtCompileError(_describe_failure(exc, model)) from exc


def _host(t: torch.Tensor) -> torch.Tensor:
    """The host (CPU) tensor to feed for input ``t``: no copy for CPU and for host-storage devices."""
    if t.device.type != "cpu":
        import torch_dipu
        import torch_dipu.tensor

        raw = torch_dipu.tensor.storage_of(t) if getattr(torch_dipu.runtime(), "host_storage", False) else t
        t = raw if raw is not t and raw.device.type == "cpu" else t.cpu()
    return t.contiguous()


#: torch dtypes whose tensors ONNX Runtime wraps from a data pointer (its numpy element type); others (bfloat16)
#: go through DLPack.
_NUMPY_DTYPES = {**_CONST_NUMPY_DTYPES, torch.float16: np.float16}
_CPU = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)


def _feeds(names: list[str], tensors: list[torch.Tensor]) -> tuple[list[str], Any]:
    """The ORT input vector of host tensors ``tensors`` (contiguous CPU) and its names in the vector's order: one
    batch of pointer-wrapped tensors (no copy, no per-tensor Python object), then DLPack (bfloat16) and empty
    tensors."""
    feeds = C.OrtValueVector()
    feeds.reserve(len(tensors))
    batch = [i for i, t in enumerate(tensors) if t.dtype in _NUMPY_DTYPES and t.numel()]
    if batch:
        wrapped = [tensors[i] for i in batch]
        feeds.push_back_batch(wrapped, [t.data_ptr() for t in wrapped], [_NUMPY_DTYPES[t.dtype] for t in wrapped],
                              [t.shape for t in wrapped], [_CPU] * len(wrapped))
    if len(batch) == len(tensors):
        return names, feeds
    order = [names[i] for i in batch]
    for i, t in enumerate(tensors):
        if t.dtype not in _NUMPY_DTYPES or not t.numel():
            feeds.push_back(C.OrtValue.from_dlpack(t.__dlpack__()) if t.numel() else
                            C.OrtValue.ortvalue_from_shape_and_onnx_type(list(t.shape), onnx_dtype(t.dtype), _CPU))
            order.append(names[i])
    return order, feeds


def load(artifact: bytes, gm: torch.fx.GraphModule) -> Callable[..., list[torch.Tensor]]:
    """Artifact -> runner: ``runner(*inputs)`` (the island's inputs in placeholder order: tensors and ints)
    returns its outputs as torch tensors with the dtypes and devices of the graph's metadata."""
    session = create_session(artifact)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = [i.name for i in session.get_inputs()]
    is_tensor = [isinstance(n.meta.get("val"), torch.Tensor) for n in placeholders]
    in_complex = [t and n.meta["val"].is_complex() for t, n in zip(is_tensor, placeholders, strict=True)]
    scalar_dtype = [torch.float64 if isinstance(n.meta.get("val"), (float, torch.SymFloat)) else torch.int64
                    for n in placeholders]
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output_node.args[0] if isinstance(output_node.args[0], (list, tuple)) else (output_node.args[0],)
    out_devices = [o.meta["val"].device for o in outs]
    out_bool = [o.meta["val"].dtype == torch.bool for o in outs]
    out_complex = [o.meta["val"].is_complex() for o in outs]
    output_names = [o.name for o in session.get_outputs()]
    if len(input_names) != len(placeholders):
        raise OrtCompileError(f"onnxgraph: artifact has {len(input_names)} inputs, the island {len(placeholders)}")
    fetch_devices = [_CPU] * len(output_names)
    run_options = C.RunOptions()
    ort_session = session._sess  # the C++ session: its vector API makes no Python object per tensor
    all_cpu_tensors = all(d.type == "cpu" for d in out_devices) and not any(out_bool) and not any(out_complex)
    any_complex_input = any(in_complex)

    def run(*inputs: Any) -> list[torch.Tensor]:
        if len(inputs) != len(input_names):
            raise TypeError(f"onnxgraph runner: expected {len(input_names)} inputs, got {len(inputs)}")
        if any_complex_input:
            inputs = [torch.view_as_real(x.resolve_conj()) if cplx else x
                      for cplx, x in zip(in_complex, inputs, strict=True)]
        hosts = [_host(x) if tensor else torch.tensor(x, dtype=dtype)
                 for tensor, dtype, x in zip(is_tensor, scalar_dtype, inputs, strict=True)]
        names, feeds = _feeds(input_names, hosts)
        fetches = C.OrtValueVector()
        ort_session.run_with_ortvaluevector(run_options, names, feeds, output_names, fetches, fetch_devices)
        results = fetches.to_dlpacks(torch._C._from_dlpack)
        if all_cpu_tensors:
            return results
        for i, (t, device, is_bool, cplx) in enumerate(zip(results, out_devices, out_bool, out_complex, strict=True)):
            t = t.view(torch.bool) if is_bool and t.dtype != torch.bool else t
            t = torch.view_as_complex(t) if cplx else t
            results[i] = t if device.type == "cpu" else t.to(device)
        return results

    return run


def check_shapes(artifact: bytes, gm: torch.fx.GraphModule) -> list[str]:
    """ONNX shape inference on ``artifact`` against the island's ``meta["val"]``: one line per disagreement in
    dtype, rank or a static size of a node's value (the declared output shapes are left out of the inference)."""
    from .codegen import VALUES_PROP, graph_dtype, onnx_dtype

    model = onnx.load_from_string(artifact)
    props = {p.key: p.value for p in model.metadata_props}
    values: dict[str, str] = json.loads(props.get(VALUES_PROP, "{}"))
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    inferred = {v.name: v.type.tensor_type for v in [*model.graph.value_info, *model.graph.output]}
    problems: list[str] = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        tt = inferred.get(values.get(node.name, ""))
        if node.op != "call_function" or not isinstance(val, torch.Tensor) or tt is None:
            continue
        where = f"{node.name} ({node.target})"
        if tt.elem_type and tt.elem_type != onnx_dtype(graph_dtype(val.dtype)):
            problems.append(f"{where}: ONNX element type {tt.elem_type} != {val.dtype}")
        if not tt.HasField("shape"):
            continue
        dims = tt.shape.dim
        shape = [*val.shape, 2] if val.is_complex() else list(val.shape)  # complex: (real, imag) pairs
        if len(dims) != len(shape):
            problems.append(f"{where}: rank {len(dims)} != {len(shape)}")
            continue
        for i, (d, s) in enumerate(zip(dims, shape, strict=True)):
            if type(s) is int and d.HasField("dim_value") and d.dim_value != s:
                problems.append(f"{where}: size {i} is {d.dim_value}, expected {s}")
    return problems
