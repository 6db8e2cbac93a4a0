"""How one operator call is stored: the case format every ditorch tool reads and writes.

A case is a directory holding ``case.json`` (the op name, call site, the structure of the arguments and
outputs with plain values inline and tensors by reference, the layout of every tensor, versions) and
``tensors.safetensors`` (the data). Gradients recorded later go to ``backward.safetensors``. Nothing is
pickled: loading a case never executes code.

A tensor is stored as the contiguous run of storage elements its view can reach (from its storage offset
to its last element), with its dtype, shape, stride and storage offset recorded, so
:func:`rebuild_tensor` gives back a tensor with the same layout: a non-contiguous input replays as
non-contiguous. Values are encoded by :class:`Encoder` and decoded by :func:`decode_value`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "BACKWARD_FILE",
    "CASE_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "TENSORS_FILE",
    "CaseBuilder",
    "CaseFormatError",
    "Encoder",
    "LoadedCase",
    "NotReplayableError",
    "add_gradient",
    "atomic_open",
    "backward_section",
    "build_record",
    "decode_value",
    "device_type",
    "dtype_from_name",
    "dtype_name",
    "host_copy",
    "host_span",
    "library_versions",
    "load_case",
    "load_tensors",
    "rebuild_tensor",
    "storage_span",
    "write_case",
    "write_json",
    "write_tensors",
]

FORMAT_NAME = "ditorch-case"
FORMAT_VERSION = 1
CASE_FILE = "case.json"
TENSORS_FILE = "tensors.safetensors"
BACKWARD_FILE = "backward.safetensors"

# dtypes safetensors stores natively, with their names in its header; others are stored as raw bytes (U8)
# and viewed back with the dtype recorded in case.json.
_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}


class CaseFormatError(ValueError):
    """A case directory or file that cannot be read: the message names the file and what is wrong."""


class NotReplayableError(ValueError):
    """A case whose call cannot be rebuilt (an argument that was not serializable, an unknown op)."""


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; a clear error for anything else."""
    return _torch_attr(name, torch.dtype, "dtype")


def storage_span(shape: tuple[int, ...] | torch.Size, stride: tuple[int, ...]) -> int:
    """How many storage elements a view of ``shape``/``stride`` reaches from its storage offset."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((size - 1) * st for size, st in zip(shape, stride, strict=True))


def host_span(t: torch.Tensor, allocate: Callable[[int, torch.dtype], torch.Tensor] | None = None) -> torch.Tensor:
    """A contiguous 1-D host copy of the storage elements ``t`` reaches (see :func:`storage_span`).

    ``allocate(numel, dtype)``, if given, supplies the host buffer (a pool of reused buffers saves the page
    faults of fresh allocations)."""
    if torch.is_grad_enabled():
        with torch.no_grad():
            return host_span(t, allocate)
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    numel = t.numel()
    if numel and t.is_contiguous():
        source = t  # the span of a contiguous tensor is its elements
    else:
        numel = storage_span(t.shape, t.stride())
        source = t.as_strided((numel,), (1,), t.storage_offset())
    if allocate is not None:
        buffer = allocate(numel, t.dtype)
        buffer.view(source.shape).copy_(source)
        return buffer
    host = source.clone() if source.device.type == "cpu" else source.to("cpu")
    return host.reshape(numel)


@dataclass
class Encoder:
    """Encodes Python values (args, kwargs, outputs) into JSON-ready structures.

    Tensors are replaced by ``{"tensor": key}``; their layout goes to :attr:`meta` and, unless
    ``with_data`` is False, a host copy of their storage span to :attr:`data`. Keys are ``prefix`` plus a
    running index, in the order tensors are met, which is the order :func:`tensor_keys` gives back.
    """

    prefix: str
    with_data: bool = True
    allocate: Callable[[int, torch.dtype], torch.Tensor] | None = None
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    data: dict[str, torch.Tensor] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    opaque: list[str] = field(default_factory=list)
    keys_by_id: dict[int, str] = field(default_factory=dict)

    def encode(self, value: Any) -> Any:
        """The JSON-ready form of ``value``."""
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, torch.Tensor):
            return {"tensor": self._add_tensor(value)}
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            return {"float": repr(value)}
        if isinstance(value, complex):
            return {"complex": [self.encode(value.real), self.encode(value.imag)]}
        if isinstance(value, torch.Size):
            return {"size": list(value)}
        if isinstance(value, torch.dtype):
            return {"dtype": dtype_name(value)}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, torch.layout):
            return {"layout": str(value).removeprefix("torch.")}
        if isinstance(value, torch.memory_format):
            return {"memory_format": str(value).removeprefix("torch.")}
        if isinstance(value, slice):
            return {"slice": [self.encode(value.start), self.encode(value.stop), self.encode(value.step)]}
        if value is Ellipsis:
            return {"ellipsis": None}
        if isinstance(value, torch.Generator):
            return {"generator": str(value.device)}
        if isinstance(value, tuple):
            encoded: dict[str, Any] = {"tuple": [self.encode(v) for v in value]}
            module = type(value).__module__
            if module == "torch.return_types":
                encoded["type"] = type(value).__name__
            return encoded
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {"dict": {k: self.encode(v) for k, v in value.items()}}
        text = f"{type(value).__module__}.{type(value).__qualname__}"
        self.opaque.append(text)
        return {"opaque": text, "repr": _short_repr(value)}

    def key_of(self, t: torch.Tensor) -> str | None:
        """The key an encoded tensor got (the same object encoded twice gets one key)."""
        return self.keys_by_id.get(id(t))

    def _add_tensor(self, t: torch.Tensor) -> str:
        known = self.keys_by_id.get(id(t))
        if known is not None:
            return known
        key = f"{self.prefix}{len(self.meta)}"
        self.keys_by_id[id(t)] = key
        self.meta[key] = tensor_meta(t)
        self.tensors[key] = t
        if self.with_data:
            self.data[key] = host_span(t, self.allocate)
        return key


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """A host copy of ``t`` with its shape, strides and storage offset, and no autograd history (the storage
    elements it reaches are copied in one pass, so overlapping and non-contiguous layouts are kept)."""
    return rebuild_tensor(tensor_meta(t), host_span(t), "cpu")


def tensor_meta(t: torch.Tensor) -> dict[str, Any]:
    """The layout record of one tensor."""
    return {
        "dtype": dtype_name(t.dtype),
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "storage_offset": int(t.storage_offset()),
        "device": str(t.device),
        "requires_grad": bool(t.requires_grad),
    }


@functools.cache
def library_versions() -> dict[str, str]:
    """The versions a case records: ``{"torch", "ditorch", "python"}`` (``"unknown"`` for an uninstalled
    ditorch). Read once per process; callers get a copy."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ditorch_version = version("ditorch")
    except PackageNotFoundError:
        ditorch_version = "unknown"
    return {"torch": torch.__version__, "ditorch": ditorch_version, "python": platform.python_version()}


def build_record(*, tool: str, op: str, call_id: int, step: int, rank: int, call_site: str | None, device: str,
                 inplace: bool, random: bool, mode: str, args: Any, kwargs: Any, outputs: Any,
                 tensors: dict[str, dict[str, Any]], opaque: Sequence[str] = (),
                 backward: dict[str, Any] | None = None, reference_outputs: Any = None,
                 versions: dict[str, str] | None = None, collective: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``case.json`` record of one call, with every field the case format requires (every writer builds
    its record here, so all cases have the same fields). ``args``, ``kwargs``, ``outputs`` and
    ``reference_outputs`` are already encoded (:class:`Encoder`); ``tensors`` is the layout of every tensor
    they reference; ``backward`` is a section from :func:`backward_section` or None (no gradients, yet);
    ``reference_outputs`` the outputs a checking tool expected (None where there is no reference);
    ``versions`` defaults to :func:`library_versions`. ``collective`` describes a call that talks to other ranks
    (``torch.distributed.all_reduce``: its process group's size and this rank in it); such a case records what
    this rank saw and is not replayable alone (``"replayable": false``; readers of older cases take a missing
    field as true)."""
    return {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "tool": tool, "op": op, "id": call_id, "step": step,
        "rank": rank, "call_site": call_site, "device": device, "inplace": bool(inplace), "random": bool(random),
        "mode": mode, "args": args, "kwargs": kwargs, "outputs": outputs, "reference_outputs": reference_outputs,
        "tensors": tensors, "opaque": list(opaque), "backward": backward,
        "versions": dict(versions if versions is not None else library_versions()),
        "collective": collective, "replayable": collective is None,
    }


class CaseBuilder:
    """One case being assembled; every writer of cases (op capture, auto-compare, upstream import, conformance,
    module dumps) builds its case here. Values are encoded by role, each role an :class:`Encoder` named by its
    key prefix (``i`` the call's arguments, ``o`` its outputs, ``r`` reference outputs, ``w`` written arguments,
    ``p`` a module's state); :meth:`record` and :attr:`data` take all roles together."""

    def __init__(self, allocate: Callable[[int, torch.dtype], torch.Tensor] | None = None) -> None:
        self.allocate = allocate
        self.encoders: dict[str, Encoder] = {}
        self.args: Any = None
        self.kwargs: Any = None

    def encoder(self, prefix: str) -> Encoder:
        """The encoder of one role (made on first use)."""
        enc = self.encoders.get(prefix)
        if enc is None:
            enc = self.encoders[prefix] = Encoder(prefix, allocate=self.allocate)
        return enc

    def encode(self, prefix: str, value: Any) -> Any:
        """``value`` encoded in role ``prefix``."""
        return self.encoder(prefix).encode(value)

    def encode_call(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Encode a call's arguments (role ``i``) as the record's ``args`` and ``kwargs``."""
        enc = self.encoder("i")
        self.args, self.kwargs = enc.encode(list(args)), {k: enc.encode(v) for k, v in kwargs.items()}

    @property
    def meta(self) -> dict[str, dict[str, Any]]:
        """The layout of every tensor encoded so far, by key."""
        return {k: m for e in self.encoders.values() for k, m in e.meta.items()}

    @property
    def data(self) -> dict[str, torch.Tensor]:
        """The host copy of every tensor encoded so far, by key."""
        return {k: t for e in self.encoders.values() for k, t in e.data.items()}

    def record(self, **fields: Any) -> dict[str, Any]:
        """The case record (:func:`build_record`) with this case's arguments, tensors and opaque values; ``fields``
        are build_record's others."""
        return build_record(args=self.args, kwargs=self.kwargs, tensors=self.meta,
                            opaque=[o for e in self.encoders.values() for o in e.opaque], **fields)


def write_case(folder: Path, record: dict[str, Any], data: dict[str, torch.Tensor] | None) -> int:
    """Write one case to ``folder`` (made if missing): its tensors (when ``data`` is given), then ``case.json``,
    last, so that a folder without it is an unfinished case that readers skip. Returns bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = write_tensors(folder / TENSORS_FILE, data) if data is not None else 0
    return written + write_json(folder / CASE_FILE, record)


def backward_section() -> dict[str, Any]:
    """An empty backward section: ``{"grad_inputs": {}, "grad_outputs": {}, "tensors": {}}``; fill it with
    :func:`add_gradient`."""
    return {"grad_inputs": {}, "grad_outputs": {}, "tensors": {}}


def add_gradient(section: dict[str, Any], data: dict[str, torch.Tensor], kind: str, key: str,
                 grad: torch.Tensor, device: str) -> str:
    """Record ``grad``, the gradient of the tensor ``key`` (``kind`` ``"grad_inputs"`` or ``"grad_outputs"``),
    in a backward ``section``, its storage span in ``data`` (a contiguous host gradient as it is, without a
    copy) and its layout with ``device``, the device the call ran on. Returns its key (``"g" + key``)."""
    if kind not in ("grad_inputs", "grad_outputs"):
        raise ValueError(f"kind must be 'grad_inputs' or 'grad_outputs', not {kind!r}")
    gkey = f"g{key}"
    data[gkey] = grad.reshape(-1) if grad.device.type == "cpu" and grad.is_contiguous() else host_span(grad)
    meta = tensor_meta(grad)
    meta["device"] = device
    section["tensors"][gkey] = meta
    section[kind][key] = gkey
    return gkey


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not stop a capture
        text = f"<unprintable: {exc}>"
    return text if len(text) <= 200 else text[:197] + "..."


def _decode_float(text: str) -> float:
    if text not in ("nan", "inf", "-inf"):
        raise CaseFormatError(f"bad float value {text!r}")
    return float(text)


def decode_value(struct: Any, tensors: dict[str, torch.Tensor], device_map: dict[str, str] | None = None) -> Any:
    """Rebuild a value encoded by :class:`Encoder`; tensors come from ``tensors`` by key. ``device_map``
    maps device types (``{"dipu": "cpu"}``) so device arguments follow the tensors to the replay device.
    """
    if struct is None or isinstance(struct, (bool, int, float, str)):
        return struct
    if isinstance(struct, list):
        return [decode_value(v, tensors, device_map) for v in struct]
    if not isinstance(struct, dict) or len(struct) == 0:
        raise CaseFormatError(f"unexpected value {struct!r}")
    if "tensor" in struct:
        key = struct["tensor"]
        if key not in tensors:
            raise CaseFormatError(f"tensor {key!r} is referenced but not stored")
        return tensors[key]
    if "tuple" in struct:
        items = tuple(decode_value(v, tensors, device_map) for v in struct["tuple"])
        kind = struct.get("type")
        if kind is not None:
            cls = getattr(torch.return_types, str(kind), None)
            if cls is None:
                raise CaseFormatError(f"unknown return type torch.return_types.{kind}")
            return cls(items)
        return items
    if "dict" in struct:
        return {k: decode_value(v, tensors, device_map) for k, v in struct["dict"].items()}
    if "float" in struct:
        return _decode_float(struct["float"])
    if "complex" in struct:
        re_, im = (decode_value(v, tensors, device_map) for v in struct["complex"])
        return complex(re_, im)
    if "size" in struct:
        return torch.Size(struct["size"])
    if "dtype" in struct:
        return dtype_from_name(struct["dtype"])
    if "device" in struct:
        return torch.device(map_device(struct["device"], device_map))
    if "layout" in struct:
        return _torch_attr(struct["layout"], torch.layout, "layout")
    if "memory_format" in struct:
        return _torch_attr(struct["memory_format"], torch.memory_format, "memory format")
    if "slice" in struct:
        return slice(*(decode_value(v, tensors, device_map) for v in struct["slice"]))
    if "ellipsis" in struct:
        return Ellipsis
    if "generator" in struct:
        return None  # the target device's default generator
    if "opaque" in struct:
        raise NotReplayableError(f"an argument of type {struct['opaque']} was not serializable "
                                 f"({struct.get('repr', '')})")
    raise CaseFormatError(f"unexpected value {struct!r}")


def map_device(device: str, device_map: dict[str, str] | None) -> str:
    """``"dipu:0"`` with ``{"dipu": "cpu"}`` -> ``"cpu"``; unmapped devices are returned unchanged."""
    if not device_map:
        return device
    return device_map.get(device_type(device), device)


def _torch_attr(name: str, kind: type, what: str) -> Any:
    value = getattr(torch, str(name), None)
    if not isinstance(value, kind):
        raise CaseFormatError(f"unknown {what} {name!r}")
    return value


def rebuild_tensor(meta: dict[str, Any], span: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """The tensor described by ``meta`` on ``device``, with its recorded shape, stride and storage offset;
    ``span`` holds its storage elements (as stored by :func:`write_tensors`)."""
    try:
        dtype = dtype_from_name(meta["dtype"])
        shape = [int(s) for s in meta["shape"]]
        stride = [int(s) for s in meta["stride"]]
        offset = int(meta["storage_offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CaseFormatError(f"bad tensor record {meta!r}: {exc}") from None
    if len(shape) != len(stride) or offset < 0 or any(s < 0 for s in shape):
        raise CaseFormatError(f"bad tensor layout: shape {shape}, stride {stride}, offset {offset}")
    if span.dtype != dtype:
        if span.dtype != torch.uint8 or span.numel() % _itemsize(dtype):
            raise CaseFormatError(f"stored data of dtype {span.dtype} does not hold {dtype}")
        span = span.view(dtype)
    needed = storage_span(shape, stride)
    if span.dim() != 1 or span.numel() != needed:
        raise CaseFormatError(f"stored data has shape {list(span.shape)}; the layout needs {needed} elements in "
                              f"one dimension")
    storage = torch.empty(offset + needed, dtype=dtype, device=device)
    if needed:
        storage[offset:].copy_(span)
    return storage.as_strided(shape, stride, offset)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file in ``path``'s folder; when the block ends without an error it takes ``path``'s
    place in one step (``os.replace``). A reader sees the old complete file or the new complete one, never a
    part, and one that still maps the old file keeps its data. On an error ``path`` is left as it was and the
    temporary file is removed. Every file of a case is written through this."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_tensors(path: Path, data: dict[str, torch.Tensor]) -> int:
    """Write host tensors to a safetensors file; returns bytes written.

    The file is the safetensors format exactly (an 8-byte little-endian header length, a JSON header padded
    to 8 bytes, then the tensors' bytes back to back) and is read with the safetensors library. It is
    written here, tensor by tensor from its memory, because the library's writer spends most of its time in
    Python preparing buffers, which holds up the training thread while a capture writes in the background.
    Writers write ``case.json`` last: a case directory without it is incomplete and readers do not see it.
    """
    header: dict[str, Any] = {"__metadata__": {"format": FORMAT_NAME}}
    buffers = []
    offset = 0
    for key, t in data.items():
        t = t.detach().contiguous()
        kind = _SAFETENSORS_DTYPES.get(t.dtype)
        if kind is None:  # stored as raw bytes
            t, kind = t.reshape(-1).view(torch.uint8), "U8"
        nbytes = t.numel() * t.element_size()
        header[key] = {"dtype": kind, "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
        if nbytes:
            buffers.append(t.reshape(-1).view(torch.uint8).numpy())
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % 8)
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for buffer in buffers:
            f.write(buffer)
    return 8 + len(text) + offset


def write_json(path: Path, payload: dict[str, Any]) -> int:
    """Write ``payload`` as compact JSON, atomically (:func:`atomic_open`); returns bytes written."""
    text = json.dumps(payload, allow_nan=False)
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(text)


@dataclass
class LoadedCase:
    """One case read from disk: its ``case.json`` and the host tensors of its files."""

    path: Path
    record: dict[str, Any]
    data: dict[str, torch.Tensor]

    @property
    def op(self) -> str:
        return str(self.record["op"])

    @property
    def device_type(self) -> str:
        """The type of the device the case ran on (``"dipu"`` for ``"dipu:0"``)."""
        return device_type(str(self.record.get("device", "cpu")))


def device_type(device: str) -> str:
    """``"dipu:0"`` -> ``"dipu"``."""
    return device.split(":", 1)[0]


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; :class:`CaseFormatError` names a file that cannot be read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CaseFormatError(f"{path}: not a readable safetensors file ({exc})") from None


def load_case(case_dir: str | Path) -> LoadedCase:
    """Read one case directory; :class:`CaseFormatError` names the file at fault."""
    case_dir = Path(case_dir)
    case_file = case_dir / CASE_FILE
    try:
        record = json.loads(case_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaseFormatError(f"{case_file}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CaseFormatError(f"{case_file}: not valid JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT_NAME:
        raise CaseFormatError(f"{case_file}: not a ditorch case (no \"format\": \"{FORMAT_NAME}\")")
    version = record.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CaseFormatError(f"{case_file}: case format version {version!r} is not supported "
                              f"(this ditorch reads up to {FORMAT_VERSION})")
    for key, kind in (("op", str), ("args", list), ("kwargs", dict), ("tensors", dict), ("outputs", object)):
        if key not in record:
            raise CaseFormatError(f"{case_file}: missing field {key!r}")
        if not isinstance(record[key], kind):
            raise CaseFormatError(f"{case_file}: field {key!r} must be a {kind.__name__}, "
                                  f"not {type(record[key]).__name__}")
    if not all(isinstance(m, dict) for m in record["tensors"].values()):
        raise CaseFormatError(f"{case_file}: every entry of 'tensors' must be an object")
    data: dict[str, torch.Tensor] = {}
    if record.get("mode", "data") == "data":
        data.update(load_tensors(case_dir / TENSORS_FILE))
        backward = record.get("backward")
        if isinstance(backward, dict) and any(k not in data for k in backward.get("tensors", {})):
            data.update(load_tensors(case_dir / BACKWARD_FILE))
    missing = [k for k in record["tensors"] if k not in data] if record.get("mode", "data") == "data" else []
    if missing:
        raise CaseFormatError(f"{case_dir / TENSORS_FILE}: tensors {missing} of case.json are not stored")
    return LoadedCase(case_dir, record, data)
