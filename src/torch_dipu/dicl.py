"""dicl: the ``torch.distributed`` backend of the dipu device.

``import torch_dipu`` registers ``dicl`` with ``torch.distributed.Backend.register_backend`` for the ``dipu``
device (so ``torch.distributed.get_default_backend_for_device("dipu")`` answers ``dicl``) and for the host
tensors a group also carries. The group's transport is the vendor's collective library:
:meth:`torch_dipu.runtime.DeviceRuntime.collective_backend` returns a c10d backend working on the vendor's
storage tensors (the default, used by droplet, is gloo on host buffers).

Every c10d collective that reaches a dipu tensor, whether called from Python (``dist.all_reduce``) or from C++
(DDP's reducer, ``_broadcast_coalesced``, parameter verification), passes through :func:`build_handler`'s
handler, which:

1. numbers the call in its group (:mod:`torch_dipu.dicl_watch` keeps one state per group);
2. with no Python object left in the thread's ATen thread-local state (:func:`_no_python_objects_in_tls`: the
   root of a hang at exit), checks that every rank calls the same collective on tensors of the same dtype and
   shape (``DICL_CHECK_COLLECTIVES``, on by default), then runs it on the storage tensors;
3. waits for it: a failure (mismatched calls, a peer that was killed, raised, or never came) is a
   :class:`DiclError` naming the collective, the rank and what the other ranks did, also printed at once on stderr
   (:func:`torch_dipu.dicl_watch.wait`);
4. keeps the transport's works until the group's next call has completed, so that the transport's worker thread
   never drops the last reference to a Python object (:meth:`torch_dipu.dicl_watch.GroupState.keep`);
5. returns the caller's tensors and a completed work handle: ``wait()`` returns at once.

``ReduceOp.AVG``, which gloo lacks, is a sum divided by the group size.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _disable_current_modes

from diopi.tensor_walk import tensors_in
from torch_dipu import dicl_watch
from torch_dipu.dicl_watch import DiclError
from torch_dipu.state import get_state
from torch_dipu.tensor import DipuTensor

__all__ = ["BACKEND_NAME", "DiclError", "build_handler", "register"]

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


def register() -> None:
    """Register ``dicl`` with ``torch.distributed`` for dipu tensors and host tensors (idempotent)."""
    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["dipu", "cpu"])


def _create_backend(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Any:
    return get_state().runtime.collective_backend(store, rank, size, timeout)


# ---- one row per c10d op: its public name, how its tensors are checked, how it runs on storage tensors ----

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


#: What a runner returns: the transport's work, and what to do once it has completed (None: nothing).
Finish = Callable[[], None] | None


def _averaging(pg: Any, tensors: list[torch.Tensor], avg: bool) -> Finish:
    """The finish step of a reduction: divide ``tensors`` by the group size when the op was AVG."""
    return (lambda: _average(tensors, pg.size())) if avg and tensors else None


def _run_allreduce(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    op, avg = _reduce_op(a)
    tensors = _raw(a["tensors"])
    return pg.allreduce(tensors, _opts(dist.AllreduceOptions, a, reduceOp=op)), _averaging(pg, tensors, avg)


def _run_allreduce_coalesced(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    op, avg = _reduce_op(a)
    tensors = _raw(a["tensors"])
    opts = _opts(dist.AllreduceCoalescedOptions, a, reduceOp=op)
    return pg.allreduce_coalesced(tensors, opts), _averaging(pg, tensors, avg)


def _run_reduce(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    op, avg = _reduce_op(a)
    tensors = _raw(a["tensors"])
    opts = _opts(dist.ReduceOptions, a, reduceOp=op, rootRank=a["root_rank"], rootTensor=a["root_tensor"])
    return pg.reduce(tensors, opts), _averaging(pg, tensors, avg and pg.rank() == a["root_rank"])  # the root's


def _run_reduce_scatter(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    op, avg = _reduce_op(a)
    outputs = _raw(a["output_tensors"])
    work = pg.reduce_scatter(outputs, _raw(a["input_tensors"]), _opts(dist.ReduceScatterOptions, a, reduceOp=op))
    return work, _averaging(pg, outputs, avg)


def _run_reduce_scatter_base(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    op, avg = _reduce_op(a)
    output = _raw(a["output_tensor"])
    work = pg._reduce_scatter_base(output, _raw(a["input_tensor"]), _opts(dist.ReduceScatterOptions, a, reduceOp=op))
    return work, _averaging(pg, [output], avg)


def _run_reduce_scatter_coalesced(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    op, avg = _reduce_op(a)
    outputs = _raw(a["outputs"])
    opts = _opts(dist.ReduceScatterOptions, a, reduceOp=op)
    return pg.reduce_scatter_tensor_coalesced(outputs, _raw(a["inputs"]), opts), _averaging(pg, outputs, avg)


def _run_all_to_all(pg: Any, a: dict[str, Any]) -> tuple[Any, Finish]:
    """``all_to_all`` on lists, as one ``all_to_all_single`` on flat buffers (gloo has only the latter)."""
    outputs, inputs = _raw(a["output_tensors"]), _raw(a["input_tensors"])
    send = torch.cat([t.reshape(-1) for t in inputs]) if inputs else torch.empty(0)
    receive = torch.empty(sum(t.numel() for t in outputs), dtype=send.dtype, device=send.device)
    work = pg.alltoall_base(receive, send, [t.numel() for t in outputs], [t.numel() for t in inputs],
                            _opts(dist.AllToAllOptions, a))

    def copy_out() -> None:
        with torch.no_grad():
            for t, part in zip(outputs, receive.split([t.numel() for t in outputs]), strict=True):
                t.copy_(part.view(t.shape))

    return work, copy_out


_RUNNERS: dict[str, tuple[str, str, Callable[[Any, dict[str, Any]], tuple[Any, Finish]]]] = {
    # c10d op: (public name, checked tensors ("shape:<arg>", "dtype:<arg>" or "" for none), runner)
    "allreduce_": ("all_reduce", "shape:tensors", _run_allreduce),
    "allreduce_coalesced_": ("all_reduce_coalesced", "shape:tensors", _run_allreduce_coalesced),
    "broadcast_": ("broadcast", "shape:tensors", lambda pg, a: (pg.broadcast(
        _raw(a["tensors"]), _opts(dist.BroadcastOptions, a, rootRank=a["root_rank"], rootTensor=a["root_tensor"])),
        None)),
    "reduce_": ("reduce", "shape:tensors", _run_reduce),
    "allgather_": ("all_gather", "shape:input_tensors", lambda pg, a: (pg.allgather(
        _raw(a["output_tensors"]), _raw(a["input_tensors"]), _opts(_c10d.AllgatherOptions, a)), None)),
    "_allgather_base_": ("all_gather_into_tensor", "shape:input_tensor", lambda pg, a: (pg._allgather_base(
        _raw(a["output_tensor"]), _raw(a["input_tensor"]), _opts(_c10d.AllgatherOptions, a)), None)),
    "allgather_coalesced_": ("all_gather_coalesced", "shape:input_list", lambda pg, a: (pg.allgather_coalesced(
        _raw(a["output_lists"]), _raw(a["input_list"]), _opts(_c10d.AllgatherOptions, a)), None)),
    "allgather_into_tensor_coalesced_": ("all_gather_into_tensor_coalesced", "shape:inputs", lambda pg, a: (
        pg.allgather_into_tensor_coalesced(_raw(a["outputs"]), _raw(a["inputs"]), _opts(_c10d.AllgatherOptions, a)),
        None)),
    "reduce_scatter_": ("reduce_scatter", "shape:output_tensors", _run_reduce_scatter),
    "_reduce_scatter_base_": ("reduce_scatter_tensor", "shape:input_tensor", _run_reduce_scatter_base),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter_tensor_coalesced", "shape:inputs",
                                         _run_reduce_scatter_coalesced),
    "alltoall_": ("all_to_all", "dtype:input_tensors", _run_all_to_all),
    "alltoall_base_": ("all_to_all_single", "dtype:input", lambda pg, a: (pg.alltoall_base(
        _raw(a["output"]), _raw(a["input"]), a["output_split_sizes"], a["input_split_sizes"],
        _opts(dist.AllToAllOptions, a)), None)),
    "gather_": ("gather", "shape:input_tensors", lambda pg, a: (pg.gather(
        _raw(a["output_tensors"]), _raw(a["input_tensors"]), _opts(dist.GatherOptions, a, rootRank=a["root_rank"])),
        None)),
    "scatter_": ("scatter", "shape:output_tensors", lambda pg, a: (pg.scatter(
        _raw(a["output_tensors"]), _raw(a["input_tensors"]), _opts(dist.ScatterOptions, a, rootRank=a["root_rank"])),
        None)),
    "barrier": ("barrier", "none:", lambda pg, a: (pg.barrier(_opts(dist.BarrierOptions, a)), None)),
    # Point-to-point: only two ranks take part, so there is no all-rank check.
    "send": ("send", "", lambda pg, a: (pg.send(_raw(a["tensors"]), a["dst"], a["tag"]), None)),
    "recv_": ("recv", "", lambda pg, a: (pg.recv(_raw(a["tensors"]), a["src"], a["tag"]), None)),
    "recv_any_source_": ("recv", "", lambda pg, a: (pg.recv_anysource(_raw(a["tensors"]), a["tag"]), None)),
}
_OP_CODES = {name: code for code, name in enumerate(sorted(_RUNNERS), 1)}


def _fingerprint(op: str, check: str, a: dict[str, Any]) -> torch.Tensor:
    kind, _, argument = check.partition(":")
    tensors = tensors_in(a[argument]) if argument else []
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


def _check_across_ranks(pg: Any, op: str, check: str, a: dict[str, Any], call: _Call) -> None:
    """Raise :class:`DiclError` on every rank when the ranks' calls of this collective differ."""
    name = call.name
    mine = _fingerprint(op, check, a)
    everyone = torch.empty(pg.size() * _FINGERPRINT, dtype=torch.int64)
    _wait(pg._allgather_base(everyone, mine, _c10d.AllgatherOptions()), call)
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


class _Call:
    """One collective in progress: its group's state, its number in the group, its public name, and the transport
    works it made (kept when it ends: :meth:`torch_dipu.dicl_watch.GroupState.keep`)."""

    __slots__ = ("name", "number", "state", "works")

    def __init__(self, state: dicl_watch.GroupState, name: str, numbered: bool) -> None:
        if numbered:
            state.calls += 1
        self.state, self.number, self.name, self.works = state, state.calls if numbered else None, name, []


def _wait(work: Any, call: _Call) -> None:
    """Wait for a transport work of ``call``; a failure is a :class:`DiclError` naming the collective, the rank and
    what the other ranks did (:func:`torch_dipu.dicl_watch.wait`)."""
    call.works.append(work)
    dicl_watch.wait(work, call.state, call.number, call.name)


#: Point-to-point ops: only two ranks take part (so they get no call number: the group's other ranks would not
#: count them), and gloo cannot wait on their works in parts.
_POINT_TO_POINT = frozenset({"send", "recv_", "recv_any_source_"})


@contextlib.contextmanager
def _no_python_objects_in_tls() -> Iterator[None]:
    """Run the block with no Python object in this thread's ATen thread-local state; put them back after.

    The root of a hang at exit (issue 32): a c10d transport work (gloo's ``AsyncWork``) saves the creating thread's
    ``at::ThreadLocalState`` for its worker thread, and that state holds Python objects whenever one is set. DDP's
    reducer issues its gradient all-reduce from an autograd hook, inside ``backward()``, and
    ``torch.autograd.graph._engine_run_backward`` keeps a ``contextvars.Context`` in that state for the whole
    backward pass (``torch._C._stash_obj_in_tls("context", ...)``); the torch-function and dispatch mode stacks,
    saved-tensor default hooks (activation checkpointing) and checkpoint's graph-exec group are Python objects too.
    The worker dropped the finished work, and with it the last reference to that object, after the thread that
    issued it had moved on; destroying it needs the GIL. At interpreter exit the thread destroying the DDP reducer
    holds the GIL and joins that worker in ``~ProcessGroupGloo``: both wait forever (gdb: the worker in
    ``take_gil`` under ``~ThreadLocalState`` under ``~AsyncWork``, the main thread in ``thread::join`` under
    ``~ProcessGroupGloo``). dicl creates every transport work inside this block, so the state a work saves holds
    nothing of Python's. A work's tensors are the other way it holds Python objects (dipu's storage tensors are
    Python-made): :meth:`torch_dipu.dicl_watch.GroupState.keep` makes sure the worker never drops the last
    reference to those.
    """
    C = torch._C
    context = C._get_obj_in_tls("context") if C._is_key_in_tls("context") else None
    if context is not None:
        C._remove_obj_from_tls("context")
    function_modes = [C._pop_torch_function_stack() for _ in range(C._len_torch_function_stack())]
    hooks = []
    while (top := C._autograd._top_saved_tensors_default_hooks(True)) is not None:
        hooks.append(top)
        C._autograd._pop_saved_tensors_default_hooks()
    exec_group = C._get_graph_exec_group()
    if exec_group is not None:
        C._set_graph_exec_group(None)
    try:
        if C._len_torch_dispatch_stack():
            with _disable_current_modes():
                yield
        else:
            yield
    finally:
        if exec_group is not None:
            C._set_graph_exec_group(exec_group)
        for pack, unpack in reversed(hooks):
            C._autograd._push_saved_tensors_default_hooks(pack, unpack)
        for mode in reversed(function_modes):
            C._push_on_torch_function_stack(mode)
        if context is not None:
            C._stash_obj_in_tls("context", context)


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
    future.set_result(tensors_in(written))
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
        call = _Call(dicl_watch.group_state(pg), name, numbered=op not in _POINT_TO_POINT)
        with _no_python_objects_in_tls():
            try:
                if check and get_state().config.check_collectives and pg.size() > 1:
                    _check_across_ranks(pg, op, check, a, call)
                try:
                    work, finish = run(_transport(pg, op), a)
                except RuntimeError as exc:
                    if isinstance(exc, DiclError):
                        raise
                    raise DiclError(f"dicl {name} on rank {pg.rank()}: {exc}") from exc
                _wait(work, call)
                if finish is not None:
                    finish()
            finally:
                call.state.keep(call.works)
        return _results(func, a)

    return handler
