"""Replay captures of upstream op_tools (``input.pth``, ``output.pth``, ``grad_inputs.pth``, ``grad_outputs.pth``).

Upstream's ``OpCapture`` wrote one folder per call. The seeds show these layouts (all are accepted; the root is
``op_capture_result``, or ``op_capture_results``)::

    op_capture_result/0/2024-08-06--11-41/torch.Tensor.sum/14/{input,output,grad_inputs,grad_outputs}.pth
    op_capture_result/torch.Tensor.div/2334011/5                  (run_op_from_data.py's argument)
    op_capture_result/torch.nn.functional.linear/93/{device,cpu}/{input,output}.pth   (OpAutoCompare dumps)

and upstream's own writer (``save_op_args``) puts the time under the id: ``<op>/<pid>/<id>/<time>/input.pth``.
A capture folder is any folder holding ``input.pth`` or ``output.pth``; ``find_captures`` finds them under
the tree root or any subfolder. Every ``.pth`` is upstream's ``torch.save`` of a dict
``{"name": op, "args": (...), "kwargs": {...}, "identifier": ...}``: in ``input.pth`` the call's arguments,
in ``output.pth`` ``args == (result,)``, in ``grad_outputs.pth`` the gradients of the op's outputs and in
``grad_inputs.pth`` the gradients the op's backward node produced (one per edge of ``grad_fn``). A file that
is not such a dict is read as the value itself (``{"args", "kwargs"}`` without a name, a bare output).

Decisions where the seeds are silent:

- Loading never runs code: every file is read with ``torch.load(path, weights_only=True)``, the storages
  kept on the CPU (a ``map_location`` that leaves them there and notes the device each was saved from,
  which becomes the captured device, as ``device`` in our cases). Beyond PyTorch's plain data (tensors,
  numbers, strings, containers, dtypes, devices, sizes) only ``slice``, ``Ellipsis`` and the named tuples
  of ``torch.return_types`` are allowed. Anything else (a pickled class, a function) is refused with
  :class:`RefusedFileError`, naming the file; the call is then an ERROR of replay, the others go on.
- The op is the ``"name"`` the file records (what upstream's runner called); a file without one takes it
  from the path: the nearest folder, below ``op_capture_result(s)``, named like a dotted op
  (``torch.Tensor.add``). The call id is the last all-digit folder of the path.
- The capture becomes a case in memory (:func:`load_capture`, built with :func:`diopi.case_format.build_record`
  and :class:`~diopi.case_format.Encoder`), so replay rebuilds, runs and judges it exactly as one of ours;
  nothing is written into the capture folder.
- Backward: ``grad_outputs.pth`` is matched to the op's floating outputs in order. Upstream recorded the
  input gradients per edge of the op's backward node, not per argument; to match them to arguments the op
  runs once on the CPU and each edge that leads straight to an argument takes that gradient. Gradients of
  edges that lead to an argument through a transpose (``F.linear``'s weight, as ``w.t()``) are transposed
  back; those of edges that lead elsewhere are not judged, and the result's message says so. Without both
  gradient files, or when they do not match, only the forward pass is replayed and the message says why.
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from diopi import case_format as cf
from diopi.tensor_walk import tensors_in
from op_tools.naming import draws_random, info_for_name, is_inplace_name, resolve_function

__all__ = [
    "CAPTURE_FILES",
    "ROOT_NAMES",
    "ImportedCapture",
    "RefusedFileError",
    "find_captures",
    "is_capture_dir",
    "load_capture",
    "load_pth",
    "op_name_from_path",
]

ROOT_NAMES = ("op_capture_result", "op_capture_results")
CAPTURE_FILES = ("input.pth", "output.pth", "grad_inputs.pth", "grad_outputs.pth")
TOOL = "upstream OpCapture"
_OP_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


class RefusedFileError(cf.CaseFormatError):
    """A ``.pth`` file that is not plain data: loading it would have to run code, so it was not loaded."""


@dataclass
class ImportedCapture:
    """An upstream capture as one of our cases, and what the import could not carry over (``note``)."""

    case: cf.LoadedCase
    note: str = ""


def is_capture_dir(path: str | Path) -> bool:
    """Whether ``path`` is an upstream capture folder (it holds ``input.pth`` or ``output.pth``)."""
    path = Path(path)
    return (path / "input.pth").is_file() or (path / "output.pth").is_file()


def find_captures(root: str | Path) -> list[Path]:
    """Upstream capture folders under ``root`` (``root`` itself included), unordered duplicates removed."""
    root = Path(root)
    found = {p.parent for name in ("input.pth", "output.pth") for p in root.rglob(name) if p.is_file()}
    return sorted(found)


def op_name_from_path(path: str | Path) -> str | None:
    """The op a capture folder's path names: the nearest folder, going up and stopping at
    ``op_capture_result(s)``, named like a dotted op (``torch.Tensor.add``); None if there is none."""
    for part in reversed(Path(path).resolve().parts):
        if part in ROOT_NAMES:
            break
        if _OP_NAME.fullmatch(part):
            return part
    return None


def _call_id(path: Path) -> int:
    for part in reversed(path.parts):
        if part.isdigit():
            return int(part)
        if part in ROOT_NAMES:
            break
    return 0


def _safe_globals() -> list[Any]:
    returns = [v for v in vars(torch.return_types).values() if isinstance(v, type) and issubclass(v, tuple)]
    return [slice, (Ellipsis, "builtins.Ellipsis"), *returns]


def load_pth(path: Path) -> tuple[Any, dict[int, str]]:
    """One ``.pth`` file loaded with ``weights_only=True`` onto the CPU, and the device each storage was saved
    from (by the storage's data pointer). :class:`RefusedFileError` for a file that is not plain data,
    :class:`~diopi.case_format.CaseFormatError` for one that cannot be read."""
    locations: dict[int, str] = {}

    def keep_on_cpu(storage: Any, location: str) -> Any:
        locations[storage.data_ptr()] = str(location)
        return storage

    try:
        with torch.serialization.safe_globals(_safe_globals()):
            value = torch.load(path, map_location=keep_on_cpu, weights_only=True)
    except FileNotFoundError:
        raise cf.CaseFormatError(f"{path}: missing") from None
    except pickle.UnpicklingError as exc:
        detail = next((line.strip() for line in str(exc).splitlines() if "WeightsUnpickler error" in line), "")
        if "Unsupported" in detail:
            detail = detail.removeprefix("WeightsUnpickler error:").strip().split(". ", 1)[0]
            raise RefusedFileError(f"{path}: refused: not plain data, loading it would run code ({detail}); "
                                   f"only tensors and plain values are loaded (torch.load weights_only=True)"
                                   ) from None
        raise cf.CaseFormatError(f"{path}: not a readable .pth file ({detail or str(exc).splitlines()[0]})"
                                 ) from None
    except Exception as exc:
        raise cf.CaseFormatError(f"{path}: not a readable .pth file ({type(exc).__name__}: {exc})") from None
    return value, locations


def _values(value: Any, path: Path) -> tuple[Any, ...]:
    """The ``args`` of one of upstream's records (or the value itself when it is a bare tuple or list)."""
    if isinstance(value, dict) and "args" in value:
        value = value["args"]
    if not isinstance(value, (tuple, list)):
        raise cf.CaseFormatError(f"{path}: expected upstream's record {{'args': (...), ...}}, "
                                 f"found {type(value).__name__}")
    return tuple(value)


def _device_of(t: torch.Tensor, locations: dict[int, str], default: str) -> str:
    if t.untyped_storage().nbytes() == 0:
        return default
    return locations.get(t.untyped_storage().data_ptr(), default)


def _differentiable(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def load_capture(case_dir: str | Path, allow_modules: tuple[str, ...] | list[str] = ()) -> ImportedCapture:
    """One upstream capture folder as a case replay can run (see the module's description).
    :class:`~diopi.case_format.CaseFormatError` names the file at fault."""
    case_dir = Path(case_dir)
    inp, in_locs = load_pth(case_dir / "input.pth")
    if isinstance(inp, dict) and "args" in inp:
        args, kwargs, name = inp["args"], inp.get("kwargs") or {}, inp.get("name")
    elif isinstance(inp, (tuple, list)):
        args, kwargs, name = inp, {}, None
    else:
        raise cf.CaseFormatError(f"{case_dir / 'input.pth'}: expected upstream's record "
                                 f"{{'name': ..., 'args': (...), 'kwargs': {{...}}}}, found {type(inp).__name__}")
    if not isinstance(args, (tuple, list)) or not isinstance(kwargs, dict) or not all(
            isinstance(k, str) for k in kwargs):
        raise cf.CaseFormatError(f"{case_dir / 'input.pth'}: 'args' must be a tuple and 'kwargs' a dict of names")
    op = name if isinstance(name, str) and name else op_name_from_path(case_dir)
    if not op:
        raise cf.CaseFormatError(f"{case_dir / 'input.pth'}: records no op name, and the path names none "
                                 f"(expected op_capture_result/<op>/...)")
    out_value, out_locs = load_pth(case_dir / "output.pth")
    if isinstance(out_value, dict) and "args" in out_value:
        values = _values(out_value, case_dir / "output.pth")
        output = values[0] if len(values) == 1 else values
    else:
        output = out_value

    case = cf.CaseBuilder()
    case.encode_call(args, kwargs)
    enc = case.encoder("i")
    on_device = [loc for t in enc.tensors.values() if (loc := _device_of(t, in_locs, "cpu")) != "cpu"]
    device = on_device[0] if on_device else "cpu"
    for key, t in enc.tensors.items():
        enc.meta[key]["device"] = _device_of(t, in_locs, device)
    out_enc = case.encoder("o")
    outputs = out_enc.encode(output)
    for key, t in out_enc.tensors.items():
        out_enc.meta[key]["device"] = _device_of(t, out_locs, device)
    data = case.data

    backward, note = None, ""
    has = [(case_dir / f).is_file() for f in ("grad_outputs.pth", "grad_inputs.pth")]
    if any(has) and not all(has):
        missing = "grad_outputs.pth" if not has[0] else "grad_inputs.pth"
        note = f"upstream capture: forward only, backward not replayed ({missing} is missing)"
    elif all(has):
        grad_outputs = _values(load_pth(case_dir / "grad_outputs.pth")[0], case_dir / "grad_outputs.pth")
        grad_inputs = _values(load_pth(case_dir / "grad_inputs.pth")[0], case_dir / "grad_inputs.pth")
        backward, note = _backward_section(op, case.args, case.kwargs, enc, out_enc, grad_outputs, grad_inputs,
                                           device, allow_modules, is_inplace_name(op))
        if backward is not None:
            data.update(backward.pop("data"))
    random = draws_random(info_for_name(op), args, kwargs)  # sdpa with dropout_p > 0 is random, without is not
    record = case.record(
        tool=TOOL, op=op, call_id=_call_id(case_dir), step=0, rank=0, call_site=None, device=device,
        inplace=is_inplace_name(op), random=random, mode="data", outputs=outputs, backward=backward, versions={})
    return ImportedCapture(cf.LoadedCase(case_dir, record, data), note)


def _backward_section(op: str, args_enc: Any, kwargs_enc: dict[str, Any], enc: cf.Encoder, out_enc: cf.Encoder,
                      grad_outputs: tuple[Any, ...], grad_inputs: tuple[Any, ...], device: str,
                      allow_modules: tuple[str, ...] | list[str], inplace: bool,
                      ) -> tuple[dict[str, Any] | None, str]:
    """Our backward section (plus its tensors under ``"data"``) from upstream's gradients, and a note on
    what could not be matched."""
    forward_only = "upstream capture: forward only, backward not replayed"
    section = cf.backward_section()
    data: dict[str, torch.Tensor] = {}
    outs = list(out_enc.tensors.items())
    diff_outs = [(k, t) for k, t in outs if _differentiable(t)]
    pairs = diff_outs if len(grad_outputs) == len(diff_outs) else outs if len(grad_outputs) == len(outs) else None
    if pairs is None:
        return None, f"{forward_only} ({len(grad_outputs)} output gradients for {len(diff_outs)} floating outputs)"
    for (key, t), g in zip(pairs, grad_outputs, strict=True):
        if isinstance(g, torch.Tensor):
            if g.shape != t.shape:
                return None, f"{forward_only} (output gradient of shape {list(g.shape)} for output {list(t.shape)})"
            cf.add_gradient(section, data, "grad_outputs", key, g, device)
    if not section["grad_outputs"]:
        return None, f"{forward_only} (grad_outputs.pth holds no gradient)"
    try:
        edges = _input_edges(op, args_enc, kwargs_enc, enc, device, allow_modules, inplace)
    except Exception as exc:
        return None, f"{forward_only} (its backward graph could not be inspected: {type(exc).__name__}: {exc})"
    if len(edges) != len(grad_inputs):
        return None, (f"{forward_only} (grad_inputs.pth holds {len(grad_inputs)} gradients; the op's backward "
                      f"node has {len(edges)} inputs)")
    skipped = 0
    for (key, transposed), g in zip(edges, grad_inputs, strict=True):
        if not isinstance(g, torch.Tensor):
            continue
        if transposed and g.dim() == 2:
            g = g.t()  # the gradient of ``w.t()`` is the transpose of the gradient of ``w``
        if key is None or g.shape != enc.tensors[key].shape:
            skipped += 1
            continue
        cf.add_gradient(section, data, "grad_inputs", key, g, device)
    if not section["grad_inputs"]:
        return None, f"{forward_only} (no recorded input gradient belongs to an argument of the call)"
    note = ""
    if skipped:
        note = (f"upstream capture: {skipped} recorded input gradient(s) not judged (they belong to intermediate "
                f"results of the op's backward graph, not to its arguments)")
    section["data"] = data
    return section, note


def _input_edges(op: str, args_enc: Any, kwargs_enc: dict[str, Any], enc: cf.Encoder, device: str,
                 allow_modules: tuple[str, ...] | list[str], inplace: bool) -> list[tuple[str | None, bool]]:
    """Run the op once on the CPU with the captured inputs that required grad as leaves; for each edge of its
    backward node, the key of the argument it leads to directly, or through one transpose (``F.linear``
    reaches its weight through ``w.t()``: then True), and (None, False) for any other edge."""
    func = resolve_function(op, allow_modules)
    leaves: dict[int, str] = {}
    tensors: dict[str, torch.Tensor] = {}
    for key, t in enc.tensors.items():
        t = t.detach()
        if enc.meta[key]["requires_grad"] and _differentiable(t):
            leaf = t.clone().requires_grad_(True)
            leaves[id(leaf)] = key
            t = leaf.clone() if inplace else leaf  # an in-place op may not write into a leaf
        else:
            t = t.clone()
        tensors[key] = t
    device_map = {cf.device_type(device): "cpu"}
    with torch.enable_grad():
        out = func(*cf.decode_value(args_enc, tensors, device_map),
                   **cf.decode_value({"dict": kwargs_enc}, tensors, device_map))
    node = next((t.grad_fn for t in tensors_in(out, unique=True) if t.grad_fn is not None), None)
    if node is None:
        raise ValueError("the replayed result has no backward node")
    keys: list[tuple[str | None, bool]] = []
    for edge, _ in node.next_functions:
        transposed = False
        if edge is not None and inplace and edge.name().startswith("CloneBackward"):
            edge = edge.next_functions[0][0]
        if edge is not None and edge.name() == "TBackward0":
            edge, transposed = edge.next_functions[0][0], True
        variable = getattr(edge, "variable", None) if edge is not None else None
        keys.append((leaves.get(id(variable)), transposed) if variable is not None else (None, False))
    return keys
