"""OpFallback: run the device's operator calls on the CPU and put the results back on the device.

Tensor inputs on the device are copied to the CPU with a differentiable ``.to("cpu")``, the same function
runs there, and new results come back with a differentiable ``.to(device)``, so the backward pass runs on
the CPU too and gradients reach the device tensors. Inputs the CPU run wrote (in-place ops, ``out=``,
normalization's running statistics) are copied back into the device tensors, under the user's grad mode,
and the call returns the device tensors themselves. Views and in-place reshapes compute nothing and a copy
would break writes through them: those calls run on the device as usual. Calls that move data to another
device (``x.cpu()``, ``x.to("cpu")``) are left alone.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from op_tools import config
from op_tools.engine import OpCall, collect_tensors, map_tensors, print_line
from op_tools.naming import QUIET_WRITERS
from op_tools.results import ResultTable, choose_run_dir
from op_tools.tool import OpTool

__all__ = ["HALF_DTYPES", "OpFallback", "cpu_copy", "makes_view", "map_tensors"]

HALF_DTYPES = (torch.float16, torch.bfloat16)
# Calls that change a tensor's identity or metadata rather than its values: they always run where they are.
_RUN_IN_PLACE = frozenset({"detach", "detach_", "set_", "resize_", "resize_as_", "as_strided_", "record_stream",
                           "pin_memory", "share_memory_"})
_LEAVE_DEVICE = frozenset({"torch.Tensor.cpu", "torch.Tensor.cuda", "torch.Tensor.numpy"})


def makes_view(out: Any, origin: dict[int, torch.Tensor], cpu_copies: list[torch.Tensor] = ()) -> bool:
    """Whether an output of a call on copies (``origin`` maps their ids) is a view of a copy, or shares
    storage with one of ``cpu_copies``: the call made a view (or an alias, like ``detach``)."""
    storages = {p for t in cpu_copies if (p := t.untyped_storage().data_ptr()) != 0}
    for t in collect_tensors(out, [], set()):
        if id(t) in origin:
            continue
        if t._base is not None and id(t._base) in origin:
            return True
        if storages and t.device.type == "cpu" and t.untyped_storage().data_ptr() in storages:
            return True
    return False


def cpu_copy(t: torch.Tensor) -> torch.Tensor:
    """A differentiable CPU copy of ``t`` with its strides (a view's copy is as non-contiguous as the view,
    so ``contiguous()`` and friends decide as on the device); tensors with overlapping elements (``expand``)
    are copied contiguously."""
    if torch._debug_has_internal_overlap(t) != 1:  # 0: no overlap, 2: cannot tell (a non-dense view)
        try:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu").copy_(t)
        except RuntimeError:  # the strides do overlap
            pass
    return t.to("cpu")


def _as_device(value: Any) -> torch.device | None:
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        try:
            return torch.device(value)
        except RuntimeError:
            return None
    return None


class _RandomFromDevice:
    """Random calls draw from the device's generator (when its state fits the CPU's), not the CPU's: the
    device's random stream advances as without the fallback and the CPU's stays untouched."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.module: Any = None

    def __enter__(self) -> None:
        try:
            module = torch.get_device_module(self.device.type)
            index = self.device.index if self.device.index is not None else module.current_device()
            state = module.get_rng_state(index)
            self.saved = torch.get_rng_state()
            torch.set_rng_state(state.cpu())
        except Exception:  # a generator of another kind (CUDA's Philox): the CPU's generator draws
            return
        self.module, self.index = module, index

    def __exit__(self, *exc: object) -> None:
        if self.module is not None:
            self.module.set_rng_state(torch.get_rng_state(), self.index)
            torch.set_rng_state(self.saved)


class OpFallback(OpTool):
    """Run matched calls on the device on the CPU instead.

    Keywords (environment variable in brackets): ``ops``/``disable_ops`` [``OP_FALLBACK_LIST`` /
    ``OP_FALLBACK_DISABLE_LIST``], ``retry_float32`` [``OP_FALLBACK_RETRY_FLOAT32``]: when the CPU run
    fails and an input is float16/bfloat16, run again with those inputs in float32 and cast the results
    back; ``device`` [``OP_TOOLS_DEVICE``], ``steps``, ``results_dir`` [``OP_TOOLS_RESULTS_DIR``],
    ``run_id`` [``OP_TOOLS_RUN_ID``]. :attr:`results` holds one row per call run on the CPU.
    """

    env_prefix = "OP_FALLBACK"
    executes = True

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None, retry_float32: bool | None = None,
                 results_dir: str | os.PathLike[str] | None = None, run_id: str | None = None) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps)
        self._explicit_retry_float32 = retry_float32
        self.apply_config(self.config)
        self.results_dir = results_dir
        self.run_id = run_id
        self.table: ResultTable | None = None
        self.fallen_back = 0
        self.in_float32 = 0

    def read_config(self) -> config.FallbackConfig:
        return config.fallback_config()

    def apply_config(self, cfg: config.FallbackConfig) -> None:
        self.retry_float32 = cfg.retry_float32 if self._explicit_retry_float32 is None else self._explicit_retry_float32

    def on_start(self) -> None:
        self.table = ResultTable(self.name, choose_run_dir("op_fallback", self.results_dir, self.run_id))

    def on_stop(self) -> None:
        if self.table is not None:
            self.table.close()
            where = f"; rows in {self.table.run_dir}" if self.fallen_back else ""
            print_line(f"{self.name}: {self.fallen_back} calls ran on the CPU "
                       f"({self.in_float32} of them in float32){where}")

    @property
    def results(self) -> list[dict[str, Any]]:
        """One row per call that ran on the CPU (read back from ``results.jsonl``)."""
        return self.table.rows if self.table is not None else []

    # -- deciding --------------------------------------------------------------------------------------
    def before(self, call: OpCall) -> torch.device | None:
        """The device new results go to, or None to leave the call alone."""
        device = next((t.device for t in call.inputs if t.device.type == self.device_type), None)
        if device is None or call.outputs or call.name in _LEAVE_DEVICE:
            return None  # the call made its first device tensor (a factory, x.to(device)): it already ran
        if call.name.rsplit(".", 1)[-1] in _RUN_IN_PLACE:
            return None
        targets = self._device_arguments(call)
        if any(t.type != self.device_type for t in targets):
            return None  # the call moves data to another device
        return targets[0] if targets else device

    def _device_arguments(self, call: OpCall) -> list[torch.device]:
        found = [v for v in (*call.args, *call.kwargs.values()) if isinstance(v, torch.device)]
        if isinstance(call.kwargs.get("device"), (str, int)):
            found.append(torch.device(call.kwargs["device"]) if isinstance(call.kwargs["device"], str)
                         else torch.device(self.device_type, call.kwargs["device"]))
        if call.name == "torch.Tensor.to":
            for arg in call.args[1:2]:
                device = arg.device if isinstance(arg, torch.Tensor) else _as_device(arg)
                if device is not None:
                    found.append(device)
        return found

    # -- running ---------------------------------------------------------------------------------------
    def execute(self, call: OpCall, state: torch.device, func: Any, args: tuple, kwargs: dict) -> Any:
        with torch._C.DisableTorchFunction():  # our own calls are never intercepted (apply_feature too)
            return self._run(call, state, func, args, kwargs)

    def _to_cpu(self, value: Any, origin: dict[int, torch.Tensor], copies: dict[int, torch.Tensor]) -> Any:
        if isinstance(value, torch.Tensor):
            if value.device.type != self.device_type:
                return value
            copy = copies.get(id(value))
            if copy is None:
                copy = copies[id(value)] = cpu_copy(value)
                origin[id(copy)] = value
            return copy
        if isinstance(value, torch.device) and value.type == self.device_type:
            return torch.device("cpu")
        if isinstance(value, torch.Generator) and value.device.type == self.device_type:
            raise ValueError("a generator of the device cannot draw on the CPU")
        return value

    def _cpu_device(self, value: Any) -> Any:
        """A device given as a string or an index (``x.to("dipu")``, ``device=0``), for the CPU run."""
        device = _as_device(value) if isinstance(value, str) else None
        if isinstance(value, int) and not isinstance(value, bool) or (device is not None
                                                                       and device.type == self.device_type):
            return "cpu"
        return value

    def _run(self, call: OpCall, target: torch.device, func: Any, args: tuple, kwargs: dict) -> Any:
        origin: dict[int, torch.Tensor] = {}  # id(cpu copy) -> device tensor
        copies: dict[int, torch.Tensor] = {}  # id(device tensor) -> cpu copy
        cargs = map_tensors(args, lambda v: self._to_cpu(v, origin, copies))
        ckwargs = map_tensors(kwargs, lambda v: self._to_cpu(v, origin, copies))
        if call.name == "torch.Tensor.to" and len(args) > 1 and isinstance(args[1], (str, int)):
            cargs = (cargs[0], self._cpu_device(args[1]), *cargs[2:])
        if isinstance(kwargs.get("device"), (str, int)):
            ckwargs = {**ckwargs, "device": self._cpu_device(kwargs["device"])}
        message, back_dtype = "ran on cpu", None
        try:
            out, written = self._run_cpu(call, target, func, cargs, ckwargs, origin)
        except Exception:
            halves = [c for c in copies.values() if c.dtype in HALF_DTYPES]
            if not (self.retry_float32 and halves):
                raise
            back_dtype = halves[0].dtype
            widened = {id(c): c.to(torch.float32) for c in halves}
            for c in halves:
                origin[id(widened[id(c)])] = origin[id(c)]
            widen = lambda v: widened.get(id(v), v) if isinstance(v, torch.Tensor) else v  # noqa: E731
            cargs, ckwargs = map_tensors(cargs, widen), map_tensors(ckwargs, widen)
            out, written = self._run_cpu(call, target, func, cargs, ckwargs, origin)
            message = "ran on cpu in float32"
        if out is _ON_DEVICE:
            return func(*args, **kwargs)
        for copy in written:
            origin[id(copy)].copy_(copy)
        cpu_inputs = {id(t) for t in call.inputs if t.device.type != self.device_type}

        def back(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if id(value) in origin:
                return origin[id(value)]
            if value.device.type != "cpu" or id(value) in cpu_inputs:
                return value
            if back_dtype is not None and value.dtype == torch.float32:
                value = value.to(back_dtype)
            return value.to(target)

        result = map_tensors(out, back)
        self._record(call, message)
        return result

    def _run_cpu(self, call: OpCall, target: torch.device, func: Any, cargs: tuple, ckwargs: dict,
                 origin: dict[int, torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
        """Run on the CPU copies: the output and the copies it wrote, or ``_ON_DEVICE`` when the call only
        made a view or changed a tensor's metadata."""
        used = [t for t in collect_tensors((cargs, ckwargs), [], set()) if id(t) in origin]
        versions = [t._version for t in used]
        quiet = call.name in QUIET_WRITERS
        before = {id(t): t.clone() for t in used if not t.requires_grad} if quiet else {}
        if call.info.random:
            with _RandomFromDevice(target):
                out = func(*cargs, **ckwargs)
        else:
            out = func(*cargs, **ckwargs)
        written = [t for t, v in zip(used, versions, strict=True)
                   if t._version != v or (id(t) in before and not torch.equal(t, before[id(t)]))]
        if any(t.shape != origin[id(t)].shape for t in written):
            return _ON_DEVICE, []
        if makes_view(out, origin, used):
            return _ON_DEVICE, []
        return out, written

    def _record(self, call: OpCall, message: str) -> None:
        self.fallen_back += 1
        self.in_float32 += message.endswith("float32")
        if self.table is None:
            return
        first = next((t for t in call.inputs if t.device.type == self.device_type), None)
        self.table.add({"id": call.call_id, "name": call.name, "phase": "forward", "verdict": "PASS",
                        "step": call.step, "dtype": str(first.dtype).removeprefix("torch.") if first is not None
                        else "", "shape": list(first.shape) if first is not None else "", "message": message,
                        "call_site": call.call_site})


_ON_DEVICE: Any = object()  # the call is run on the device after all
