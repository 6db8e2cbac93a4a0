"""OpObserve: one line per operator call (name, shapes, dtypes, device, call site), and per backward.

With ``verbose`` (``OP_TOOLS_VERBOSE=1``) each call gets a table of every argument and output instead.
Lines go to stderr, or to a file (``file=`` / ``OP_OBSERVE_FILE``). Observing never changes a result.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import IO, Any

import torch

from diopi.case_format import dtype_name
from op_tools import config
from op_tools.autograd_hooks import GradMeta
from op_tools.protocol import OpCall, Phase, print_line
from op_tools.tool import OpTool

__all__ = ["OpObserve", "describe_tensor"]


_dtype = functools.cache(dtype_name)  # "float32", looked up once per dtype


def describe_tensor(t: torch.Tensor | GradMeta) -> str:
    """``float32[2, 64, 128]``."""
    return f"{_dtype(t.dtype)}{list(t.shape)}"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return describe_tensor(value)
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        inner = ", ".join(_describe(v) for v in value[:8])
        more = ", ..." if len(value) > 8 else ""
        return f"[{inner}{more}]" if isinstance(value, list) else f"({inner}{more})"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _rows(prefix: str, value: Any, rows: list[tuple[str, ...]]) -> None:
    if isinstance(value, torch.Tensor):
        rows.append((prefix, "tensor", _dtype(value.dtype), str(list(value.shape)), str(list(value.stride())),
                     str(value.storage_offset()), str(value.device), str(value.requires_grad)))
    elif isinstance(value, (list, tuple)) and not isinstance(value, torch.Size) and len(value) <= 64:
        for i, v in enumerate(value):
            _rows(f"{prefix}[{i}]", v, rows)
    elif isinstance(value, dict):
        for k, v in value.items():
            _rows(f"{prefix}[{k!r}]", v, rows)
    else:
        rows.append((prefix, type(value).__name__, _describe(value), "", "", "", "", ""))


def _table(rows: list[tuple[str, ...]]) -> str:
    header = ("name", "kind", "dtype/value", "shape", "stride", "offset", "device", "requires_grad")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in (header, *rows))


class OpObserve(OpTool):
    """Print every matched call.

    Keywords (environment variable in brackets): ``ops``/``disable_ops`` [``OP_OBSERVE_LIST`` /
    ``OP_OBSERVE_DISABLE_LIST``], ``file`` [``OP_OBSERVE_FILE``], ``verbose`` [``OP_TOOLS_VERBOSE``],
    ``backward`` (also a line per backward, default True), ``device`` [``OP_TOOLS_DEVICE``], ``steps``.
    :attr:`observed` counts the calls seen.
    """

    env_prefix = "OP_OBSERVE"
    read_config = staticmethod(config.observe_config)
    phases = Phase.AFTER | Phase.BACKWARD  # observation only: the engine's thin path
    backward_needs = "meta"

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None,
                 file: str | os.PathLike[str] | None = None, verbose: bool | None = None,
                 backward: bool = True) -> None:
        super().__init__(ops=ops, disable_ops=disable_ops, device=device, steps=steps)
        self.keep_explicit(file=file, verbose=verbose)
        self.apply_config(self.config)
        if not backward:
            self.phases = Phase.AFTER
        self.observed = 0
        self.backward_observed = 0
        self.lines = 0
        self._out: IO[str] | None = None

    def apply_config(self, cfg: config.ObserveConfig) -> None:
        self.file = self.explicit("file", cfg.file)
        self.verbose = self.explicit("verbose", cfg.verbose)

    def on_start(self) -> None:
        if self.file is not None:
            try:
                self._out = open(self.file, "a", encoding="utf-8")  # noqa: SIM115 (closed in on_stop)
            except OSError as exc:
                print(f"OpObserve: cannot open {self.file} ({exc.strerror or exc}); printing to stderr",
                      file=sys.stderr, flush=True)
                self._out = None

    def on_stop(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def _emit(self, text: str) -> None:
        self.lines += text.count("\n") + 1
        if self._out is not None:
            self._out.write(text + "\n")
        else:
            print_line(text)  # stderr, with the rank in a multi-process run

    def after(self, call: OpCall, state: Any, output: Any) -> None:
        self.observed += 1
        if self.verbose:
            rows: list[tuple[str, ...]] = []
            _rows("args", list(call.args), rows)
            for k, v in call.kwargs.items():
                _rows(k, v, rows)
            _rows("output", output, rows)
            self._emit(f"OpObserve: {call.name}  step {call.step}  at {call.call_site}\n{_table(rows)}")
            return
        inputs = ", ".join(_describe(a) for a in call.args)
        if call.kwargs:
            kw = ", ".join(f"{k}={_describe(v)}" for k, v in call.kwargs.items())
            inputs = f"{inputs}, {kw}" if inputs else kw
        device = next((str(t.device) for t in (*call.inputs, *call.outputs) if t.device.type == self.device_type),
                      self.device_type)
        self._emit(f"OpObserve: {call.name} ({inputs}) -> {_describe(output)} on {device} at {call.call_site}")

    def on_backward(self, call: OpCall, state: Any, grad_inputs: dict[int, Any], grad_outputs: dict[int, Any]) -> None:
        self.backward_observed += 1
        outs = ", ".join(describe_tensor(g) for _, g in sorted(grad_outputs.items()))
        ins = ", ".join(describe_tensor(g) for _, g in sorted(grad_inputs.items()))
        self._emit(f"OpObserve: {call.name} backward (grad_outputs: {outs}) -> (grad_inputs: {ins})")
