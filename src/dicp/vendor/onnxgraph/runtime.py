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

from dicp.config import dicp_config

from .codegen import DEFAULT_OPSET, compile_island
from .conversion import conversions

__all__ = ["OrtCompileError", "check_shapes", "compile_artifact", "load", "session_options", "versions"]


class OrtCompileError(RuntimeError):
    """ONNX Runtime rejected a model; the message names the fx node and ATen operator it complained about."""


def versions() -> dict[str, str]:
    """The compiler and runtime versions (part of the compile cache key)."""
    return {"onnx": onnx.__version__, "onnxruntime": ort.__version__, "opset": str(DEFAULT_OPSET)}


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


def _to_ort(t: torch.Tensor) -> ort.OrtValue:
    if t.dtype == torch.bool or t.numel() == 0:
        return ort.OrtValue.ortvalue_from_numpy(t.numpy())
    return ort.OrtValue.from_dlpack(t)


def load(artifact: bytes, gm: torch.fx.GraphModule) -> Callable[..., list[torch.Tensor]]:
    """Artifact -> runner: ``runner(*inputs)`` (the island's inputs in placeholder order: tensors and ints)
    returns its outputs as torch tensors with the dtypes and devices of the graph's metadata."""
    session = create_session(artifact)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = [i.name for i in session.get_inputs()]
    is_tensor = [isinstance(n.meta.get("val"), torch.Tensor) for n in placeholders]
    is_float_input = [isinstance(n.meta.get("val"), (float, torch.SymFloat)) for n in placeholders]
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output_node.args[0] if isinstance(output_node.args[0], (list, tuple)) else (output_node.args[0],)
    out_devices = [o.meta["val"].device for o in outs]
    output_names = [o.name for o in session.get_outputs()]
    if len(input_names) != len(placeholders):
        raise OrtCompileError(f"onnxgraph: artifact has {len(input_names)} inputs, the island {len(placeholders)}")

    def run(*inputs: Any) -> list[torch.Tensor]:
        if len(inputs) != len(input_names):
            raise TypeError(f"onnxgraph runner: expected {len(input_names)} inputs, got {len(inputs)}")
        binding = session.io_binding()
        keep: list[Any] = []
        for name, tensor, is_float, x in zip(input_names, is_tensor, is_float_input, inputs, strict=True):
            if tensor:
                host = _host(x)
                keep.append(host)
                binding.bind_ortvalue_input(name, _to_ort(host))
            elif is_float:
                binding.bind_cpu_input(name, np.array(float(x), dtype=np.float64))
            else:
                binding.bind_cpu_input(name, np.array(int(x), dtype=np.int64))
        for name in output_names:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        results = []
        for value, device in zip(binding.get_outputs(), out_devices, strict=True):
            t = _from_ort(value)
            results.append(t if device.type == "cpu" else t.to(device))
        return results

    return run


def _from_ort(value: ort.OrtValue) -> torch.Tensor:
    if value.data_type() == "tensor(bool)":
        return torch.from_numpy(value.numpy())
    return torch.from_dlpack(value._ortvalue.to_dlpack())


def check_shapes(artifact: bytes, gm: torch.fx.GraphModule) -> list[str]:
    """ONNX shape inference on ``artifact`` against the island's ``meta["val"]``: one line per disagreement in
    dtype, rank or a static size of a node's value (the declared output shapes are left out of the inference)."""
    from .codegen import VALUES_PROP, compute_dtype, onnx_dtype

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
        if tt.elem_type and tt.elem_type != onnx_dtype(compute_dtype(val.dtype)):
            problems.append(f"{where}: ONNX element type {tt.elem_type} != {val.dtype}")
        if not tt.HasField("shape"):
            continue
        dims = tt.shape.dim
        if len(dims) != val.dim():
            problems.append(f"{where}: rank {len(dims)} != {val.dim()}")
            continue
        for i, (d, s) in enumerate(zip(dims, val.shape, strict=True)):
            if type(s) is int and d.HasField("dim_value") and d.dim_value != s:
                problems.append(f"{where}: size {i} is {d.dim_value}, expected {s}")
    return problems
