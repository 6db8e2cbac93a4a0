"""Fault injection for droplet: ``DROPLET_FAULTS`` entries ``pattern:fault[:param]``, comma-separated.

``pattern`` is a whole-name regular expression over ATen overload names (``add.Tensor``, ``mm``,
``.*_backward``, an ``aten.`` prefix is allowed), as in ``DIPU_FORCE_FALLBACK_OPS_LIST``, or over DIOPI function
names (``diopiSiluBackward``, ``diopi(Add|Mul)``). Faults affect only droplet's own kernels: on dipu, an operator
forced to CPU fallback runs correctly, which is how a user proves an operator is at fault.

=============  =========================================================  ===============
fault          effect on the operator's floating-point results            param (default)
=============  =========================================================  ===============
bias           adds a constant                                            constant (1.0)
noise          adds relative Gaussian noise: ``x + x * N(0, sigma)``      sigma (0.01)
nan            writes NaN into the first element                          -
noncontig      reads non-contiguous inputs as if contiguous (wrong data)  -
inplace_lost   drops the write of an in-place / ``out=`` operator         -
grad           scales results computed during ``backward()``, and every   factor (2.0)
               result of a backward function (tag ``backward``)
slow           sleeps before running                                      milliseconds (10)
=============  =========================================================  ===============

``grad`` tells backward from forward by the autograd engine: a kernel run while ``backward()`` executes a graph
(``torch._C._current_graph_task_id() != -1``) is scaled. A kernel called directly, with no autograd running
(``ditorch conformance run --impl droplet``), is scaled when its DIOPI function is a backward function (tag
``backward``: ``diopiSiluBackward``, ``diopiConvolution2dBackward``); a forward function is left alone, as it is
outside ``backward()`` on dipu.
"""

from __future__ import annotations

import difflib
import functools
import time
from dataclasses import dataclass
from typing import Any

import torch

from diopi.env import ATEN_PREFIXES, ConfigError, compile_op_list, split_list
from diopi.impl import written_arguments
from diopi.op_names import CheckedOpList, aten_names
from diopi.registry import DiopiFunction, Kernel, aten_packet_name
from diopi.tensor_walk import tensors_in

__all__ = ["DEFAULT_PARAMS", "Fault", "inject", "op_names", "parse_faults"]

DEFAULT_PARAMS: dict[str, float | None] = {
    "bias": 1.0,
    "noise": 0.01,
    "nan": None,
    "noncontig": None,
    "inplace_lost": None,
    "grad": 2.0,
    "slow": 10.0,
}


def op_names(op: torch._ops.OpOverload) -> tuple[str, ...]:
    """The names a pattern may match for ``op``: ``add.Tensor``, ``add``; the default overload is named by its
    packet alone (``mm``) and as ``mm.default``."""
    packet = aten_packet_name(op)
    overload = op._overloadname
    return (packet if overload == "default" else f"{packet}.{overload}", packet, f"{packet}.{overload}")


@dataclass(frozen=True)
class Fault:
    """One parsed ``DROPLET_FAULTS`` entry (``pattern`` is a whole-name regex over operator or function names)."""

    pattern: str
    kind: str
    param: float | None

    def matches(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> bool:
        """Whether the pattern names ``op`` (an ATen name) or its DIOPI function ``fn`` (asked once per operator
        when its kernel is chosen; a match counts for the exit lines of :mod:`diopi.op_names`)."""
        return pattern_names(self.pattern).matches(*op_names(op), fn.name)

    def __str__(self) -> str:
        return f"{self.pattern}:{self.kind}" + ("" if self.param is None else f":{self.param:g}")


@functools.cache
def pattern_names(pattern: str) -> CheckedOpList:
    """A fault's op pattern as a checked list: ATen operator and DIOPI function names can match it."""
    return CheckedOpList([pattern], "DROPLET_FAULTS", functools.partial(aten_names, True),
                         strip_prefixes=ATEN_PREFIXES)


def _spelling_hint(parts: list[str]) -> str:
    """`` (did you mean 'linear:bias:0.5'?)`` for ``linear:bias=0.5`` or ``linear:biass:0.5``; else empty."""
    for index in range(len(parts) - 1, 0, -1):
        kind, equals, param = parts[index].partition("=")
        near = difflib.get_close_matches(kind.strip(), list(DEFAULT_PARAMS), n=1, cutoff=0.6)
        if near:
            fixed = [*parts[:index], near[0], *([param.strip()] if equals else []), *parts[index + 1:]]
            return f" (did you mean {':'.join(fixed)!r}?)"
    return ""


def parse_faults(text: str, source: str = "DROPLET_FAULTS") -> list[Fault]:
    """Parse ``pattern:fault[:param],...``; a malformed entry raises :class:`ConfigError` naming it. An op
    pattern no ATen operator or DIOPI function matches is one warning line (an error with
    ``DITORCH_STRICT=1``; :mod:`diopi.op_names`)."""
    faults = []
    for entry in split_list(text):
        parts = entry.split(":")
        if len(parts) >= 2 and parts[-1] in DEFAULT_PARAMS:
            pattern, kind, raw_param = ":".join(parts[:-1]), parts[-1], None
        elif len(parts) >= 3 and parts[-2] in DEFAULT_PARAMS:
            pattern, kind, raw_param = ":".join(parts[:-2]), parts[-2], parts[-1]
        else:
            raise ConfigError(
                f"{source} entry {entry!r} is malformed: expected op-pattern:fault[:param] "
                f"with fault one of {', '.join(DEFAULT_PARAMS)}{_spelling_hint(parts)}"
            )
        pattern = pattern.strip()
        if not pattern:
            raise ConfigError(f"{source} entry {entry!r} has an empty op pattern")
        try:
            compile_op_list([pattern], source, ATEN_PREFIXES)
        except ValueError as exc:
            raise ConfigError(f"{source} entry {entry!r}: {pattern!r} is not a valid regular expression: "
                             f"{str(exc).rpartition('regular expression: ')[2]}") from None
        param = DEFAULT_PARAMS[kind]
        if raw_param is not None:
            if DEFAULT_PARAMS[kind] is None:
                raise ConfigError(f"{source} entry {entry!r}: fault {kind!r} takes no parameter")
            try:
                param = float(raw_param)
            except ValueError:
                raise ConfigError(f"{source} entry {entry!r}: parameter {raw_param!r} is not a number") from None
        faults.append(Fault(pattern, kind, param))
    for fault in faults:
        names = pattern_names(fault.pattern)
        if source != names.source:  # an option (--fault) names itself in the messages
            names = CheckedOpList([fault.pattern], source, functools.partial(aten_names, True),
                                  strip_prefixes=ATEN_PREFIXES)
        names.check()
    return faults


def _float_results(result: Any) -> list[torch.Tensor]:
    return [t for t in tensors_in(result) if t.is_floating_point() and t.numel() > 0]


def _scratch_copy(value: Any) -> Any:
    """A copy of a written argument (a tensor or a list of tensors) for the kernel to write into instead."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_scratch_copy(v) for v in value)
    return value


def _misread(t: torch.Tensor) -> torch.Tensor:
    """What a kernel that ignores strides reads: the storage walked as if the tensor were contiguous."""
    contiguous = torch.empty(t.shape, dtype=t.dtype, device="meta").stride()
    storage_elems = t.untyped_storage().nbytes() // t.element_size()
    if t.storage_offset() + t.numel() <= storage_elems:
        return torch.as_strided(t, t.shape, contiguous, t.storage_offset())
    return t.contiguous().reshape(-1).roll(1).reshape(t.shape)


def _noise_generator() -> torch.Generator:
    return torch.Generator().manual_seed(20240607)


def inject(kernel: Kernel, fault: Fault, op: torch._ops.OpOverload, backward_function: bool = False) -> Kernel:
    """Wrap ``kernel`` so that it misbehaves as ``fault`` says. ``backward_function``: the kernel computes a
    gradient function (the ``grad`` fault then applies outside ``backward()`` too)."""
    kind, param = fault.kind, fault.param

    if kind == "slow":
        def slow(o: Any, *args: Any, **kwargs: Any) -> Any:
            time.sleep(param / 1000.0)
            return kernel(o, *args, **kwargs)
        return slow

    if kind == "noncontig":
        def misread_all(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value if value.is_contiguous() else _misread(value)
            if isinstance(value, (list, tuple)):
                return type(value)(misread_all(v) for v in value)
            return value

        def noncontig(o: Any, *args: Any, **kwargs: Any) -> Any:
            return kernel(o, *misread_all(args), **kwargs)
        return noncontig

    positions, names = written_arguments(op)

    if kind == "inplace_lost":
        if not positions and not names:
            return kernel

        def inplace_lost(o: Any, *args: Any, **kwargs: Any) -> Any:
            args = tuple(_scratch_copy(a) if i in positions else a for i, a in enumerate(args))
            kwargs = {k: (_scratch_copy(v) if k in names else v) for k, v in kwargs.items()}
            # Results that alias the written arguments are replaced by the caller's own (unchanged)
            # tensors in the dispatcher; other results (e.g. batch norm's output) are kept.
            return kernel(o, *args, **kwargs)
        return inplace_lost

    def affected(result: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """Floating results, or the written arguments of in-place operators that return nothing."""
        found = _float_results(result)
        if not found:
            written = [a for i, a in enumerate(args) if i in positions] + [kwargs[n] for n in names if n in kwargs]
            found = _float_results(written)
        return found

    if kind == "grad":
        def grad(o: Any, *args: Any, **kwargs: Any) -> Any:
            result = kernel(o, *args, **kwargs)
            if backward_function or torch._C._current_graph_task_id() != -1:
                for t in affected(result, args, kwargs):
                    t.mul_(param)
            return result
        return grad

    def corrupt(t: torch.Tensor) -> None:
        if kind == "bias":
            t.add_(param)
        elif kind == "noise":
            noise = torch.randn(t.shape, dtype=torch.float32, generator=_noise_generator())
            t.add_((t.float() * noise * param).to(t.dtype))
        elif kind == "nan":
            t[(0,) * t.dim()] = float("nan")

    def corrupting(o: Any, *args: Any, **kwargs: Any) -> Any:
        result = kernel(o, *args, **kwargs)
        for t in affected(result, args, kwargs):
            corrupt(t)
        return result
    return corrupting
