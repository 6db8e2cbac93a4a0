"""``DIPU_DUMP_OP_ARGS``: print every device op with its DIOPI function and, at higher levels, its arguments.

Levels (:data:`torch_dipu.config.DUMP_LEVELS`): 0 nothing; 1 one line per ATen op reaching the device, before it
runs, naming its DIOPI function (or the CPU fallback and its reason, or torch_dipu's own view / allocation)::

    [dipu_add_Tensor]:add.Tensor  diopiAdd

2 adds a line per schema argument in order, defaults included (tensors with their metadata, plain values as
they are, tensor lists element by element), and after the op a line per result; 3 adds each tensor's values
below its line (from a host copy, printed by torch, then a ``[ dipu:0 torch.float32{3,4} ]`` line).

The level is read at import and then follows ``torch_dipu.set_dump_op_args(n)`` and every assignment to
``os.environ["DIPU_DUMP_OP_ARGS"]`` (watched by :mod:`torch_dipu.env_watch`, never read per op): the next op
uses the new level. Level 0 installs no handler wrapper, so it costs nothing. Output goes to ``sys.stdout`` as it
is at call time. A failure while formatting prints one line naming the op and the error; the op always runs
and its results are never changed.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from torch_dipu import dispatch, env_watch, kernels
from torch_dipu.config import DUMP_LEVELS, DUMP_OP_ARGS, parse_dump_level
from torch_dipu.state import DipuState
from torch_dipu.tensor import DipuTensor

_level = 0
_watch_handle: int | None = None
_STORAGES = (torch.UntypedStorage, torch.TypedStorage)


def dump_op_args() -> int:
    """The dump level in force (0-3)."""
    return _level


def install(state: DipuState) -> None:
    """Start dumping at the level ``DIPU_DUMP_OP_ARGS`` had at import and follow its later changes."""
    global _watch_handle
    if _watch_handle is not None:
        env_watch.unwatch(_watch_handle)
    _apply(state.config.dump_op_args, force=True)
    _watch_handle = env_watch.watch(DUMP_OP_ARGS, _on_environ_change)


def set_dump_op_args(level: int) -> None:
    """Set the dump level (0-3) from the next op on, as ``os.environ["DIPU_DUMP_OP_ARGS"] = str(level)`` does
    (the environment itself is left alone). Anything else raises ``ValueError`` and keeps the level."""
    try:
        value = parse_dump_level(str(level))
    except ValueError:
        levels = "; ".join(f"{n}: {what}" for n, what in DUMP_LEVELS.items())
        raise ValueError(f"set_dump_op_args({level!r}): not a dump level (expected 0-3: {levels})") from None
    _apply(value)


def _on_environ_change(name: str, value: str | None) -> None:
    try:
        level = parse_dump_level(value, name)
    except ValueError as exc:
        raise ValueError(f"{exc}; os.environ keeps the value but the dump level stays {_level}") from None
    _apply(level)


def _apply(level: int, force: bool = False) -> None:
    global _level
    if level == _level and not force:
        return
    _level = level
    dispatch.set_handler_wrapper("dump", _dumping if level else None)


def _write(text: str) -> None:
    try:
        stream = sys.stdout
        stream.write(text)
        stream.flush()
    except Exception:  # a closed or missing stdout must not break the op
        pass


def _kernel_text(func: torch._ops.OpOverload, plan: kernels.KernelPlan) -> str:
    if plan.kind == "fallback":
        return f"fallback to cpu ({plan.reason})" if plan.reason else "fallback to cpu"
    if plan.kind == "native":
        return "view (torch_dipu)" if kernels.returns_view(func._schema) else "native (torch_dipu)"
    return plan.function.name if plan.function is not None else f"{plan.kind} kernel"


def _tensor_text(t: torch.Tensor, view: bool = False) -> str:
    """``view``: the tensor is the result of a view op (autograd marks it a view only after dispatch returns)."""
    return (
        f"numel:{t.numel()}, sizes:{list(t.shape)}, stride:{list(t.stride())}, storage_offset:{t.storage_offset()}, "
        f"is_view:{int(view or t._is_view())}, dtype:{t.dtype}, device:{t.device}, layout:{t.layout}, "
        f"requires_grad:{int(t.requires_grad)}, data_ptr:0x{t.data_ptr():x}"
    )


def _tensor_values(t: torch.Tensor) -> str:
    """The values as torch prints them (from a host copy, without running device ops), then a footer."""
    raw = t._raw if type(t) is DipuTensor else t
    host = raw.detach().cpu()
    body = torch._tensor_str._tensor_str(host, 0) if host.numel() else "[]"
    return f"{body}\n[ {t.device} {t.dtype}{{{','.join(str(s) for s in t.shape)}}} ]\n"


def _value_lines(op: str, name: str, value: Any, level: int, view: bool = False) -> str:
    if isinstance(value, torch.Tensor):
        text = f"\t{op}: {name}:{_tensor_text(value, view)}\n"
        return text + _tensor_values(value) if level >= 3 else text
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return "".join(_value_lines(op, f"{name}[{i}]", v, level, view) for i, v in enumerate(value))
    if isinstance(value, _STORAGES):
        return f"\t{op}: {name}:storage(nbytes:{value.nbytes()}, device:{value.device})\n"
    return f"\t{op}: {name}:{value}\n"


def _argument_lines(op: str, schema_args: list, args: tuple, kwargs: dict | None, level: int) -> str:
    kwargs = kwargs or {}
    parts = []
    for i, arg in enumerate(schema_args):
        if not arg.kwarg_only and i < len(args):
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            continue
        parts.append(_value_lines(op, arg.name, value, level))
    return "".join(parts)


def _result_lines(op: str, out: Any, level: int, view: bool = False) -> str:
    if type(out) is tuple or type(out) is list:
        return "".join(_value_lines(op, f"result[{i}]", o, level, view) for i, o in enumerate(out))
    return _value_lines(op, "result", out, level, view)


def _dumping(handler: dispatch.Handler, func: torch._ops.OpOverload, plan: kernels.KernelPlan) -> dispatch.Handler:
    """The ``dump`` handler wrapper for the level in force when the handler is built."""
    level = _level
    op = kernels.op_names(func)[0]
    try:
        header = f"[dipu_{op.replace('.', '_')}]:{op}  {_kernel_text(func, plan)}\n"
    except Exception as exc:
        header = f"[dipu_{op.replace('.', '_')}]:{op}  (kernel unknown: {type(exc).__name__}: {exc})\n"

    if level == 1:
        def dumped(args: tuple, kwargs: dict | None) -> Any:
            _write(header)
            return handler(args, kwargs)

        return dumped

    schema_args = list(func._schema.arguments)
    has_returns = bool(func._schema.returns)
    returns_view = kernels.returns_view(func._schema)

    def dumped_with_arguments(args: tuple, kwargs: dict | None) -> Any:
        try:
            text = header + _argument_lines(op, schema_args, args, kwargs, level)
        except Exception as exc:
            text = f"{header}\t{op}: argument dump failed: {type(exc).__name__}: {exc}\n"
        _write(text)
        out = handler(args, kwargs)
        if has_returns:
            try:
                text = _result_lines(op, out, level, returns_view)
            except Exception as exc:
                text = f"\t{op}: result dump failed: {type(exc).__name__}: {exc}\n"
            _write(text)
        return out

    return dumped_with_arguments


__all__ = ["dump_op_args", "install", "set_dump_op_args"]
