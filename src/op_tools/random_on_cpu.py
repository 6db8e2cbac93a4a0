"""OpRandomOnCPU: every random call on the device draws from the CPU's generator, as a CPU run would.

A random call with a device input (dropout, ``normal_``, ``bernoulli``, ``scaled_dot_product_attention``
with ``dropout_p > 0``, ...) runs on the CPU and its results move to the device, as
:class:`~op_tools.fallback.OpFallback` does, with ``random_generator="cpu"``. A random factory that made a
device tensor (``torch.rand(..., device="cuda")``, ``randint``, ``randperm``, ...) is drawn again on the CPU and
its values copied into the device tensor. Together with the same seeds, a device run then sees the same
random numbers (dropout masks, random data) as a CPU run of the same code: ``ditorch parity`` uses it.
Calls that draw nothing are left alone; OP_FALLBACK_* lists do not apply.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from op_tools import config
from op_tools.fallback import OpFallback
from op_tools.protocol import OpCall, Ran

__all__ = ["OpRandomOnCPU"]

_FACTORY = object()  # before's state for a factory that already made its device tensor


class OpRandomOnCPU(OpFallback):
    """Random calls on the device draw from the CPU's generator (keywords: ``device``, ``steps``,
    ``results_dir``, ``run_id``, as :class:`~op_tools.fallback.OpFallback`)."""

    results_folder = "op_random_on_cpu"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(random_generator="cpu", **kwargs)

    def read_config(self) -> config.FallbackConfig:
        return dataclasses.replace(config.fallback_config(), ops=None, disable_ops=None)

    def before(self, call: OpCall) -> Any:
        if not call.random:
            return None
        if call.ran is Ran.BEFORE_TOOLS:
            return _FACTORY if any(t.device.type == self.device_type for t in call.outputs) else None
        return super().before(call)

    def after(self, call: OpCall, state: Any, out: Any) -> None:
        """Draw a factory's values again on the CPU and copy them into its device tensor."""
        if state is not _FACTORY:
            return
        args = tuple("cpu" if isinstance(a, torch.device) and a.type == self.device_type else a for a in call.args)
        kwargs = dict(call.kwargs)
        if "device" in kwargs:
            kwargs["device"] = "cpu"
        with torch._C.DisableTorchFunction():
            fresh = call.func(*args, **kwargs)
        if not isinstance(fresh, torch.Tensor) or not isinstance(out, torch.Tensor):
            raise TypeError(f"{call.name}: expected a tensor result")
        with torch.no_grad():
            out.copy_(fresh)
        self._record(call, "drawn on cpu")
