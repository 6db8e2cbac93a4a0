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

from diopi.env import ConfigError
from diopi.tensor_walk import map_leaves
from op_tools import config
from op_tools.device_random import draws_from_cpu
from op_tools.naming import QUIET_WRITERS
from op_tools.protocol import OpCall, Phase, Ran
from op_tools.results_tool import ResultsTool
from op_tools.write_back import Substitution, cpu_copy, makes_view

__all__ = ["HALF_DTYPES", "OpFallback", "cpu_copy", "makes_view"]

HALF_DTYPES = (torch.float16, torch.bfloat16)
# Calls that change a tensor's identity or metadata rather than its values: they always run where they are.
_RUN_IN_PLACE = frozenset({"detach", "detach_", "set_", "resize_", "resize_as_", "as_strided_", "record_stream",
                           "pin_memory", "share_memory_"})
_LEAVE_DEVICE = frozenset({"torch.Tensor.cpu", "torch.Tensor.cuda", "torch.Tensor.numpy"})


def _as_device(value: Any) -> torch.device | None:
    if isinstance(value, str):
        try:
            return torch.device(value)
        except RuntimeError:
            return None
    return value if isinstance(value, torch.device) else None


class _RandomFromDevice:
    """Random calls draw from the generator the device's own kernels draw from: the device's (when its state
    fits the CPU's), so that the device's random stream advances as without the fallback and the CPU's stays
    untouched; or the CPU's, on a device whose random kernels use it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.module: Any = None

    def __enter__(self) -> None:
        try:
            module = torch.get_device_module(self.device.type)
            index = self.device.index if self.device.index is not None else module.current_device()
            if draws_from_cpu(self.device.type, index, module):
                return
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


class OpFallback(ResultsTool):
    """Run matched calls on the device on the CPU instead.

    Keywords (environment variable in brackets): ``ops``/``disable_ops`` [``OP_FALLBACK_LIST`` /
    ``OP_FALLBACK_DISABLE_LIST``], ``retry_float32`` [``OP_FALLBACK_RETRY_FLOAT32``]: when the CPU run
    fails and an input is float16/bfloat16, run again with those inputs in float32 and cast the results
    back; ``device`` [``OP_TOOLS_DEVICE``], ``steps``, ``results_dir`` [``OP_TOOLS_RESULTS_DIR``],
    ``run_id`` [``OP_TOOLS_RUN_ID``]; ``random_generator``: ``"device"`` (default) makes random calls draw from
    the device's generator, ``"cpu"`` from the CPU's (as a CPU run of the same code would). :attr:`results`
    holds one row per call run on the CPU.
    """

    env_prefix = "OP_FALLBACK"
    read_config = staticmethod(config.fallback_config)
    results_folder = "op_fallback"
    phases = Phase.BEFORE | Phase.EXECUTE

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None, retry_float32: bool | None = None,
                 results_dir: str | os.PathLike[str] | None = None, run_id: str | None = None,
                 random_generator: str = "device") -> None:
        if random_generator not in ("device", "cpu"):
            raise ConfigError(f"random_generator: expected 'device' or 'cpu', got {random_generator!r}")
        self.random_generator = random_generator
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps, results_dir=results_dir,
                         run_id=run_id)
        self.keep_explicit(retry_float32=retry_float32)
        self.apply_config(self.config)
        self.fallen_back = 0
        self.in_float32 = 0

    def apply_config(self, cfg: config.FallbackConfig) -> None:
        self.retry_float32 = self.explicit("retry_float32", cfg.retry_float32)

    def summary_lines(self) -> list[str]:
        if self.table is None:
            return []
        where = f"; rows in {self.table.run_dir}" if self.fallen_back else ""
        return [f"{self.name}: {self.fallen_back} calls ran on the CPU ({self.in_float32} of them in float32){where}"]

    # -- deciding --------------------------------------------------------------------------------------
    def before(self, call: OpCall) -> torch.device | None:
        """The device new results go to, or None to leave the call alone."""
        device = next((t.device for t in call.inputs if t.device.type == self.device_type), None)
        if device is None or call.ran is Ran.BEFORE_TOOLS or call.name in _LEAVE_DEVICE:
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

    def _to_cpu(self, value: Any, sub: Substitution) -> Any:
        if isinstance(value, torch.Tensor):
            if value.device.type != self.device_type:
                return value
            return sub.substitute(value, cpu_copy)
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
        sub = Substitution()
        cargs = map_leaves(args, lambda v: self._to_cpu(v, sub))
        ckwargs = map_leaves(kwargs, lambda v: self._to_cpu(v, sub))
        if call.name == "torch.Tensor.to" and len(args) > 1 and isinstance(args[1], (str, int)):
            cargs = (cargs[0], self._cpu_device(args[1]), *cargs[2:])
        if isinstance(kwargs.get("device"), (str, int)):
            ckwargs = {**ckwargs, "device": self._cpu_device(kwargs["device"])}
        message, back_dtype = "ran on cpu", None
        try:
            out = self._run_cpu(call, target, func, cargs, ckwargs, sub)
        except Exception:
            halves = [c for c in sub.copies.values() if c.dtype in HALF_DTYPES]
            if not (self.retry_float32 and halves):
                raise
            back_dtype = halves[0].dtype
            cargs, ckwargs = sub.recopy(cargs, ckwargs,
                                        lambda c: c.to(torch.float32) if c.dtype in HALF_DTYPES else None)
            out = self._run_cpu(call, target, func, cargs, ckwargs, sub)
            message = "ran on cpu in float32"
        if out is _ON_DEVICE:
            return func(*args, **kwargs)
        sub.write_back()
        cpu_inputs = {id(t) for t in call.inputs if t.device.type != self.device_type}

        def back(value: torch.Tensor) -> torch.Tensor:
            if value.device.type != "cpu" or id(value) in cpu_inputs:
                return value
            if back_dtype is not None and value.dtype == torch.float32:
                value = value.to(back_dtype)
            return value.to(target)

        result = sub.restore(out, back)
        self._record(call, message)
        return result

    def _run_cpu(self, call: OpCall, target: torch.device, func: Any, cargs: tuple, ckwargs: dict,
                 sub: Substitution) -> Any:
        """Run on the CPU copies: the output (``sub.written``: the copies it wrote), or ``_ON_DEVICE`` when
        the call only made a view or changed a tensor's metadata."""
        def on_cpu(*a: Any, **k: Any) -> Any:
            if call.random and self.random_generator == "device":
                with _RandomFromDevice(target):
                    return func(*a, **k)
            return func(*a, **k)

        out = sub.run(on_cpu, cargs, ckwargs, quiet=call.name in QUIET_WRITERS)
        return _ON_DEVICE if sub.resized() or sub.makes_view(out, shared_storage=True) else out

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
