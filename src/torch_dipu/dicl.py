"""dicl: the ``torch.distributed`` backend of the dipu device.

``import torch_dipu`` registers ``dicl`` with ``torch.distributed.Backend.register_backend`` for the ``dipu``
device (so ``torch.distributed.get_default_backend_for_device("dipu")`` answers ``dicl``) and for the host
tensors a group also carries. The group's transport is the vendor's collective library:
:meth:`torch_dipu.runtime.DeviceRuntime.collective_backend` returns a c10d backend working on the vendor's
storage tensors (the default, used by droplet, is gloo on host buffers).

Every c10d collective that reaches a dipu tensor, whether called from Python (``dist.all_reduce``) or from C++
(DDP's reducer, ``_broadcast_coalesced``, parameter verification), passes through :func:`build_handler`'s
handler: it checks that every rank calls the same collective on tensors of the same dtype and shape
(``DICL_CHECK_COLLECTIVES``, on by default), runs the collective on the storage tensors, waits for it, and
turns a transport failure (a peer that died or never came) into a :class:`DiclError` naming the collective,
the rank and the group's timeout. ``ReduceOp.AVG``, which gloo lacks, is a sum divided by the group size.
Work handles are returned completed: ``wait()`` returns at once.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from torch_dipu.state import get_state
from torch_dipu.tensor import DipuTensor

BACKEND_NAME = "dicl"
_c10d = torch._C._distributed_c10d
_AVG = int(dist.ReduceOp.AVG)
_SUM = dist.ReduceOp.SUM
#: Length of a collective's fingerprint: op code, tensor count, dtype code, ndim, 8 dims, total numel, dtype-only flag.
_FINGERPRINT = 14
_MAX_DIMS = 8
_DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
]


class DiclError(RuntimeError):
    """A collective failed: mismatched calls across ranks, or a transport failure (a peer that stopped)."""


def register() -> None:
    """Register ``dicl`` with ``torch.distributed`` for dipu tensors and host tensors (idempotent)."""
    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["dipu", "cpu"])


def _create_backend(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Any:
    return get_state().runtime.collective_backend(store, rank, size, timeout)


# ---- one row per c10d op: its public name, how its tensors are checked, how it runs on storage tensors ----

def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _raw(value: Any) -> Any:
    """``value`` with every dipu tensor (nested lists too) replaced by its storage tensor."""
    if type(value) is DipuTensor:
        return value._raw
    if isinstance(value, (list, tuple)):
        return [_raw(v) for v in value]
    return value


def _opts(cls: Any, a: dict[str, Any], **fields: Any) -> Any:
    opts = cls()
    for name, value in fields.items():
        setattr(opts, name, value)
    timeout = a.get("timeout", -1)
    if timeout is not None and timeout >= 0:
        opts.timeout = datetime.timedelta(milliseconds=timeout)
    return opts


def _reduce_op(a: dict[str, Any]) -> tuple[Any, bool]:
    """The ``ReduceOp`` to hand to the transport and whether the result is then divided (AVG)."""
    code = a["reduce_op"].op()
    if code == _AVG:
        return dist.ReduceOp(_SUM), True
    return dist.ReduceOp(dist.ReduceOp.RedOpType(code)), False


def _average(tensors: list[torch.Tensor], size: int) -> None:
    with torch.no_grad():
        for t in tensors:
            if t.is_floating_point() or t.is_complex():
                t.div_(size)
            else:
                t.copy_(torch.div(t, size, rounding_mode="trunc"))


def _run_allreduce(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    op, avg = _reduce_op(a)
    tensors = _raw(a["tensors"])
    return pg.allreduce(tensors, _opts(dist.AllreduceOptions, a, reduceOp=op)), tensors if avg else []


def _run_allreduce_coalesced(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    op, avg = _reduce_op(a)
    tensors = _raw(a["tensors"])
    opts = _opts(dist.AllreduceCoalescedOptions, a, reduceOp=op)
    return pg.allreduce_coalesced(tensors, opts), tensors if avg else []


def _run_reduce(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    op, avg = _reduce_op(a)
    tensors = _raw(a["tensors"])
    opts = _opts(dist.ReduceOptions, a, reduceOp=op, rootRank=a["root_rank"], rootTensor=a["root_tensor"])
    return pg.reduce(tensors, opts), tensors if avg and pg.rank() == a["root_rank"] else []  # the root's result


def _run_reduce_scatter(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    op, avg = _reduce_op(a)
    outputs = _raw(a["output_tensors"])
    work = pg.reduce_scatter(outputs, _raw(a["input_tensors"]), _opts(dist.ReduceScatterOptions, a, reduceOp=op))
    return work, outputs if avg else []


def _run_reduce_scatter_base(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    op, avg = _reduce_op(a)
    output = _raw(a["output_tensor"])
    work = pg._reduce_scatter_base(output, _raw(a["input_tensor"]), _opts(dist.ReduceScatterOptions, a, reduceOp=op))
    return work, [output] if avg else []


def _run_reduce_scatter_coalesced(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    op, avg = _reduce_op(a)
    outputs = _raw(a["outputs"])
    opts = _opts(dist.ReduceScatterOptions, a, reduceOp=op)
    return pg.reduce_scatter_tensor_coalesced(outputs, _raw(a["inputs"]), opts), outputs if avg else []


def _run_all_to_all(pg: Any, a: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    """``all_to_all`` on lists, as one ``all_to_all_single`` on flat buffers (gloo has only the latter)."""
    outputs, inputs = _raw(a["output_tensors"]), _raw(a["input_tensors"])
    send = torch.cat([t.reshape(-1) for t in inputs]) if inputs else torch.empty(0)
    receive = torch.empty(sum(t.numel() for t in outputs), dtype=send.dtype, device=send.device)
    work = pg.alltoall_base(receive, send, [t.numel() for t in outputs], [t.numel() for t in inputs],
                            _opts(dist.AllToAllOptions, a))
    work.wait()
    with torch.no_grad():
        for t, part in zip(outputs, receive.split([t.numel() for t in outputs]), strict=True):
            t.copy_(part.view(t.shape))
    return work, []


_RUNNERS: dict[str, tuple[str, str, Callable[[Any, dict[str, Any]], tuple[Any, list[torch.Tensor]]]]] = {
    # c10d op: (public name, checked tensors ("shape:<arg>", "dtype:<arg>" or "" for none), runner)
    "allreduce_": ("all_reduce", "shape:tensors", _run_allreduce),
    "allreduce_coalesced_": ("all_reduce_coalesced", "shape:tensors", _run_allreduce_coalesced),
    "broadcast_": ("broadcast", "shape:tensors", lambda pg, a: (pg.broadcast(
        _raw(a["tensors"]), _opts(dist.BroadcastOptions, a, rootRank=a["root_rank"], rootTensor=a["root_tensor"])),
        [])),
    "reduce_": ("reduce", "shape:tensors", _run_reduce),
    "allgather_": ("all_gather", "shape:input_tensors", lambda pg, a: (pg.allgather(
        _raw(a["output_tensors"]), _raw(a["input_tensors"]), _opts(_c10d.AllgatherOptions, a)), [])),
    "_allgather_base_": ("all_gather_into_tensor", "shape:input_tensor", lambda pg, a: (pg._allgather_base(
        _raw(a["output_tensor"]), _raw(a["input_tensor"]), _opts(_c10d.AllgatherOptions, a)), [])),
    "allgather_coalesced_": ("all_gather_coalesced", "shape:input_list", lambda pg, a: (pg.allgather_coalesced(
        _raw(a["output_lists"]), _raw(a["input_list"]), _opts(_c10d.AllgatherOptions, a)), [])),
    "allgather_into_tensor_coalesced_": ("all_gather_into_tensor_coalesced", "shape:inputs", lambda pg, a: (
        pg.allgather_into_tensor_coalesced(_raw(a["outputs"]), _raw(a["inputs"]), _opts(_c10d.AllgatherOptions, a)),
        [])),
    "reduce_scatter_": ("reduce_scatter", "shape:output_tensors", _run_reduce_scatter),
    "_reduce_scatter_base_": ("reduce_scatter_tensor", "shape:input_tensor", _run_reduce_scatter_base),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter_tensor_coalesced", "shape:inputs",
                                         _run_reduce_scatter_coalesced),
    "alltoall_": ("all_to_all", "dtype:input_tensors", _run_all_to_all),
    "alltoall_base_": ("all_to_all_single", "dtype:input", lambda pg, a: (pg.alltoall_base(
        _raw(a["output"]), _raw(a["input"]), a["output_split_sizes"], a["input_split_sizes"],
        _opts(dist.AllToAllOptions, a)), [])),
    "gather_": ("gather", "shape:input_tensors", lambda pg, a: (pg.gather(
        _raw(a["output_tensors"]), _raw(a["input_tensors"]), _opts(dist.GatherOptions, a, rootRank=a["root_rank"])),
        [])),
    "scatter_": ("scatter", "shape:output_tensors", lambda pg, a: (pg.scatter(
        _raw(a["output_tensors"]), _raw(a["input_tensors"]), _opts(dist.ScatterOptions, a, rootRank=a["root_rank"])),
        [])),
    "barrier": ("barrier", "none:", lambda pg, a: (pg.barrier(_opts(dist.BarrierOptions, a)), [])),
    # Point-to-point: only two ranks take part, so there is no all-rank check.
    "send": ("send", "", lambda pg, a: (pg.send(_raw(a["tensors"]), a["dst"], a["tag"]), [])),
    "recv_": ("recv", "", lambda pg, a: (pg.recv(_raw(a["tensors"]), a["src"], a["tag"]), [])),
    "recv_any_source_": ("recv", "", lambda pg, a: (pg.recv_anysource(_raw(a["tensors"]), a["tag"]), [])),
}
_OP_CODES = {name: code for code, name in enumerate(sorted(_RUNNERS), 1)}


def _fingerprint(op: str, check: str, a: dict[str, Any]) -> torch.Tensor:
    kind, _, argument = check.partition(":")
    tensors = _tensors(a[argument]) if argument else []
    values = [_OP_CODES[op], len(tensors), -1, -1, *([-1] * _MAX_DIMS), sum(t.numel() for t in tensors),
              int(kind == "dtype")]
    if tensors:
        first = tensors[0]
        values[2] = _DTYPES.index(first.dtype) if first.dtype in _DTYPES else len(_DTYPES)
        if kind == "shape":
            values[3] = first.dim()
            for i, n in enumerate(first.shape[:_MAX_DIMS]):
                values[4 + i] = n
    if kind != "shape":
        values[1] = values[12] = -1  # counts and sizes may differ across ranks (uneven all_to_all splits)
    return torch.tensor(values, dtype=torch.int64)


def _describe(row: list[int]) -> str:
    if row[2] < 0:
        return "no tensor"
    dtype = str(_DTYPES[row[2]]).removeprefix("torch.") if row[2] < len(_DTYPES) else "another dtype"
    if row[3] < 0:
        return dtype
    shape = ", ".join(str(n) for n in row[4:4 + min(row[3], _MAX_DIMS)])
    count = f" ({row[1]} tensors, {row[12]} elements)" if row[1] > 1 else ""
    return f"{dtype}[{shape}]{count}"


def _check_across_ranks(pg: Any, op: str, name: str, check: str, a: dict[str, Any]) -> None:
    """Raise :class:`DiclError` on every rank when the ranks' calls of this collective differ."""
    mine = _fingerprint(op, check, a)
    everyone = torch.empty(pg.size() * _FINGERPRINT, dtype=torch.int64)
    _wait(pg._allgather_base(everyone, mine, _c10d.AllgatherOptions()), pg, name)
    rows = everyone.view(pg.size(), _FINGERPRINT).tolist()
    if all(row == rows[0] for row in rows):
        return
    names = {code: _RUNNERS[op_name][0] for op_name, code in _OP_CODES.items()}
    if any(row[0] != rows[0][0] for row in rows):
        calls = ", ".join(f"rank {r} called {names.get(row[0], '?')}" for r, row in enumerate(rows))
        raise DiclError(f"dicl {name} on rank {pg.rank()}: the ranks called different collectives ({calls})")
    what = "dtypes" if check.startswith("dtype") else "tensors"
    calls = ", ".join(f"rank {r}: {_describe(row)}" for r, row in enumerate(rows))
    raise DiclError(f"dicl {name} on rank {pg.rank()}: the {what} differ across ranks ({calls}); every rank must "
                    f"pass the same dtype and shape")


def _wait(work: Any, pg: Any, name: str) -> None:
    try:
        work.wait()
    except RuntimeError as exc:
        raise DiclError(
            f"dicl {name} failed on rank {pg.rank()} of {pg.size()}: {exc} (a peer rank may have stopped, or did not "
            f"reach this collective within the group's timeout)"
        ) from exc


#: c10d ops a c10d ``Backend`` object has no method for: they go through the group (which dispatches on the storage
#: tensors' device).
_GROUP_ONLY = frozenset({"allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_"})


def _transport(pg: Any, op: str) -> Any:
    """The backend the group registered for dipu tensors (dicl's: the vendor's collective library), called
    directly with storage tensors; the group itself when it has none for dipu (a gloo group)."""
    if op in _GROUP_ONLY:
        return pg
    try:
        return pg._get_backend(torch.device("dipu"))
    except RuntimeError:
        return pg


def _bind(func: torch._ops.OpOverload, args: tuple, kwargs: dict | None) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    for i, argument in enumerate(func._schema.arguments):
        if i < len(args):
            bound[argument.name] = args[i]
        elif kwargs and argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


def _results(func: torch._ops.OpOverload, a: dict[str, Any]) -> Any:
    """What the c10d op returns: the caller's (dipu) tensors it wrote, then a completed work handle.

    The transport's own handle has been waited on already; gloo's point-to-point handles cannot be waited on
    twice, so the caller gets a new handle whose future holds the written tensors (DDP's reducer reads them).
    """
    written = a[func._schema.arguments[0].name]
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(_tensors(written))
    work = _c10d._create_work_from_future(future).boxed()
    if len(func._schema.returns) == 1:
        return work
    return written, work


def build_handler(func: torch._ops.OpOverload) -> Callable[[tuple, dict | None], Any]:
    """The dipu handler of c10d op ``func`` (see the module docstring)."""
    row = _RUNNERS.get(func._opname)
    if row is None:
        raise NotImplementedError(f"dicl: torch.distributed op c10d.{func._opname} is not supported on dipu tensors")
    name, check, run = row
    op = func._opname

    def handler(args: tuple, kwargs: dict | None) -> Any:
        a = _bind(func, args, kwargs)
        pg = dist.ProcessGroup.unbox(a["process_group"])
        if check and get_state().config.check_collectives and pg.size() > 1:
            _check_across_ranks(pg, op, name, check, a)
        try:
            work, averaged = run(_transport(pg, op), a)
        except RuntimeError as exc:
            if isinstance(exc, DiclError):
                raise
            raise DiclError(f"dicl {name} on rank {pg.rank()}: {exc}") from exc
        _wait(work, pg, name)
        if averaged:
            _average(averaged, pg.size())
        return _results(func, a)

    return handler
