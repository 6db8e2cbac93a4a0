"""OpDtypeCast: run the device's operator calls in a wider dtype (float16/bfloat16 in float32 by default).

Floating inputs whose dtype is a key of the cast table are cast on the device with a differentiable
``.to(dtype)``; the call runs; floating outputs in the wider dtype are cast back to the dtype the call would
have given (the promotion of its floating inputs' original dtypes). Gradients flow through both casts. An
in-place call writes into a cast copy, which is copied back into the original tensor (the call returns the
original). Calls that choose a dtype themselves (``x.float()``, ``x.to(torch.float32)``, ``dtype=``) and
views (a cast copy would break writes through them) run unchanged.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from op_tools import config
from op_tools.config import parse_cast
from op_tools.naming import QUIET_WRITERS
from op_tools.protocol import OpCall, Phase, Ran
from op_tools.results_tool import ResultsTool
from op_tools.write_back import Substitution

__all__ = ["DEFAULT_CAST", "OpDtypeCast", "parse_cast"]

#: The default cast table (also ``OP_DTYPE_CAST_DICT``'s syntax).
DEFAULT_CAST = config.DEFAULT_DTYPE_CAST
# Calls whose purpose is a dtype (casting around them would undo it) and calls that compute nothing.
_CONVERSIONS = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "short",
                          "char", "byte", "bool", "cpu", "cuda", "view", "view_as", "detach", "detach_", "set_",
                          "resize_"})


def _promoted(tensors: list[torch.Tensor]) -> torch.dtype | None:
    """The floating dtype ``tensors`` promote to (zero-dimensional ones count only when alone, as in
    PyTorch's type promotion)."""
    floats = [t for t in tensors if t.is_floating_point()]
    dims = [t for t in floats if t.dim() > 0] or floats
    result = None
    for t in dims:
        result = t.dtype if result is None else torch.promote_types(result, t.dtype)
    return result


class OpDtypeCast(ResultsTool):
    """Run matched calls on the device with some floating dtypes widened.

    Keywords (environment variable in brackets): ``cast`` [``OP_DTYPE_CAST_DICT``], default
    ``torch.float16->torch.float32,torch.bfloat16->torch.float32``; ``ops``/``disable_ops``
    [``OP_DTYPE_CAST_LIST`` / ``OP_DTYPE_CAST_DISABLE_LIST``], ``device`` [``OP_TOOLS_DEVICE``], ``steps``,
    ``results_dir`` [``OP_TOOLS_RESULTS_DIR``], ``run_id`` [``OP_TOOLS_RUN_ID``]. :attr:`results` holds one
    row per cast call.
    """

    env_prefix = "OP_DTYPE_CAST"
    read_config = staticmethod(config.dtype_cast_config)
    results_folder = "op_dtype_cast"
    phases = Phase.BEFORE | Phase.EXECUTE

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None,
                 cast: str | dict[Any, Any] | None = None, results_dir: str | os.PathLike[str] | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps, results_dir=results_dir,
                         run_id=run_id)
        self.keep_explicit(cast=cast)
        self.apply_config(self.config)
        self.casts = 0

    def apply_config(self, cfg: config.DtypeCastConfig) -> None:
        # (text, where it came from): an error names the keyword or the variable
        source = self.explicit("cast", (cfg.cast, config.DTYPE_CAST_DICT_ENV),
                               lambda given: (given, f"cast= ({config.DTYPE_CAST_DICT_ENV} syntax)"))
        self.cast = parse_cast(*source)

    def summary_lines(self) -> list[str]:
        if self.table is None:
            return []
        where = f"; rows in {self.table.run_dir}" if self.casts else ""
        return [f"{self.name}: {self.casts} calls ran with cast dtypes{where}"]

    def before(self, call: OpCall) -> torch.dtype | None:
        """The dtype floating outputs go back to, or None to leave the call alone."""
        if call.ran is Ran.BEFORE_TOOLS or call.name.rsplit(".", 1)[-1] in _CONVERSIONS:
            return None
        if not any(t.device.type == self.device_type for t in call.inputs):
            return None
        if any(isinstance(v, torch.dtype) for v in (*call.args, *call.kwargs.values())):
            return None  # the call chooses its dtype
        if not any(t.dtype in self.cast for t in call.inputs):
            return None
        return _promoted(call.inputs)

    def execute(self, call: OpCall, state: torch.dtype | None, func: Any, args: tuple, kwargs: dict) -> Any:
        with torch._C.DisableTorchFunction():
            return self._run(call, state, func, args, kwargs)

    def _run(self, call: OpCall, back: torch.dtype | None, func: Any, args: tuple, kwargs: dict) -> Any:
        sub = Substitution()
        cargs, ckwargs = sub.swap(args, kwargs, lambda t: t.to(self.cast[t.dtype]) if t.dtype in self.cast else None)
        out = sub.run(func, cargs, ckwargs, quiet=call.name in QUIET_WRITERS)  # running statistics
        if sub.makes_view(out):
            return func(*args, **kwargs)  # a view of a cast copy: the original's view is wanted
        sub.write_back()
        narrow = back if back in self.cast else None

        def restore(value: torch.Tensor) -> torch.Tensor:
            if narrow is not None and value.dtype == self.cast[narrow]:
                return value.to(narrow)
            return value

        result = sub.restore(out, restore)
        self._record(call, sorted({(str(sub.origin[id(c)].dtype), str(c.dtype)) for c in sub.copies.values()}))
        return result

    def _record(self, call: OpCall, pairs: list[tuple[str, str]]) -> None:
        self.casts += 1
        if self.table is None:
            return
        text = ", ".join(f"{a.removeprefix('torch.')}->{b.removeprefix('torch.')}" for a, b in pairs)
        self.table.add({"id": call.call_id, "name": call.name, "phase": "forward", "verdict": "PASS",
                        "step": call.step, "dtype": pairs[0][0].removeprefix("torch.") if pairs else "",
                        "message": f"ran in {text}", "call_site": call.call_site})
