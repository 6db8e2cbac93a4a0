"""The engine protocol: the phases a tool takes part in, the record of one call, and the tools' shared helpers.

An intercepted call passes through phases; each tool declares the ones it takes part in (:class:`Phase`,
the tool's ``phases``) and the engine calls exactly those:

- ``BEFORE``: :meth:`~op_tools.tool.OpTool.before` sees the inputs. Its return value is the tool's state for
  the call; ``None`` means the tool sits this call out (no further phase of the call reaches it).
- ``EXECUTE``: :meth:`~op_tools.tool.OpTool.execute` runs the call itself (on the CPU, in another dtype);
  the innermost such tool wins.
- ``AFTER``: :meth:`~op_tools.tool.OpTool.after` sees the outputs. :attr:`OpCall.ran` says how the call ran
  (:class:`Ran`): normally, by a tool's ``execute``, or before the tools because it had no device input
  and made a device tensor (factories, ``x.to(device)``). A tool never infers this.
- ``BACKWARD``: :meth:`~op_tools.tool.OpTool.on_backward` gets the gradients of every autograd node the
  call created when the backward pass ends (:mod:`op_tools.autograd_hooks`).
- ``BACKWARD_NODES``: :meth:`~op_tools.tool.OpTool.node_started` / ``node_finished`` bracket the work of
  each of those nodes (a pre-hook and a post-hook; OpTimeMeasure times the backward with them), and
  ``on_backward`` follows when the pass ends.

This module imports nothing of op_tools: the engine, the backward hooks and the tools all build on it.
"""

from __future__ import annotations

import enum
import itertools
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from diopi.result_table import print_line, rank_prefix
from diopi.steps import current_step
from op_tools.callsite import call_site
from op_tools.naming import QUIET_WRITERS, FunctionInfo, draws_random

__all__ = ["OpCall", "Phase", "Ran", "internal", "print_line", "rank_prefix", "report_failure"]


class Phase(enum.Flag):
    """The phases of an intercepted call a tool takes part in."""

    NONE = 0
    BEFORE = enum.auto()
    EXECUTE = enum.auto()
    AFTER = enum.auto()
    BACKWARD = enum.auto()
    BACKWARD_NODES = enum.auto()


class Ran(enum.Enum):
    """How a call ran, as the tools' ``after`` sees it (:attr:`OpCall.ran`)."""

    PENDING = "pending"  # not yet (during ``before``)
    NORMALLY = "normally"  # the original function ran between ``before`` and ``after``
    BY_TOOL = "by a tool"  # a tool's ``execute`` ran it
    BEFORE_TOOLS = "before the tools"  # it had no device input: it ran first, and made a device tensor


class internal:  # noqa: N801 (used like a function: ``with internal():``)
    """Context for the tools' own tensor work: nothing inside is intercepted, and no autograd graph is built."""

    __slots__ = ("_disable", "_grad")

    def __enter__(self) -> None:
        self._disable = torch._C.DisableTorchFunction()
        self._disable.__enter__()
        self._grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch._C._set_grad_enabled(self._grad)
        self._disable.__exit__(*exc)


_reported: set[tuple[str, str]] = set()


def report_failure(tool: object, op: str, stage: str, exc: BaseException) -> None:
    """One warning per tool class and op name for a tool's internal failure; the user's result is unchanged."""
    key = (type(tool).__name__, op)
    if key in _reported:
        return
    _reported.add(key)
    warnings.warn(f"{rank_prefix()}{type(tool).__name__} failed in {stage} of {op} ({type(exc).__name__}: {exc}); "
                  f"the op's result is unchanged", RuntimeWarning, stacklevel=2)


_ids = itertools.count(1)


class OpCall:
    """One intercepted call. ``args``/``kwargs``/``inputs``/``outputs`` are dropped when the call returns,
    so a backward record never keeps tensors alive."""

    __slots__ = ("name", "info", "func", "args", "kwargs", "inputs", "outputs", "call_id", "step", "_site", "_frame",
                 "backward_hooked", "ran")

    def __init__(self, info: FunctionInfo, args: tuple, kwargs: dict, inputs: list[torch.Tensor],
                 frame: FrameType | None = None, func: Callable[..., Any] | None = None) -> None:
        self.name = info.name
        self.info = info
        self.func = func  # the function called
        self.args = args
        self.kwargs = kwargs
        self.inputs = inputs
        self.outputs: list[torch.Tensor] = []
        self.call_id = next(_ids)
        self.step = current_step()
        self._site: str | None = None
        self._frame = frame
        self.backward_hooked = False  # set before ``after``: will the backward pass report to the tools?
        self.ran = Ran.PENDING

    @property
    def call_site(self) -> str:
        """``file:line function: source`` of the user's line (valid while the call runs; then cached)."""
        if self._site is None:
            self._site = call_site(self._frame)
        return self._site

    @property
    def inplace(self) -> bool:
        """The call wrote into one of its inputs (by its name, an ``out=`` argument, or returning an input)."""
        if self.info.inplace or self.kwargs.get("out") is not None:
            return True
        ids = {id(t) for t in self.inputs}
        return any(id(t) in ids for t in self.outputs)

    @property
    def random(self) -> bool:
        """The call draws random numbers: a random op by name (dropout, ``rand*``, ...), or one whose dropout
        probability argument is positive (``F.scaled_dot_product_attention(..., dropout_p=0.1)``); valid
        while the call runs."""
        return self.info.random or (self.info.random_when is not None
                                    and draws_random(self.info, self.args, self.kwargs))

    def may_write_inputs(self, *, out: bool = True) -> bool:
        """Before the call: whether it may write into its inputs: an in-place name, normalization's running
        statistics (:data:`~op_tools.naming.QUIET_WRITERS`), ``inplace=True`` and, with ``out``, ``out=``."""
        kwargs = self.kwargs
        return (self.info.inplace or self.name in QUIET_WRITERS
                or (bool(kwargs) and (kwargs.get("inplace") is True or (out and kwargs.get("out") is not None))))

    def release(self) -> None:
        self.args, self.kwargs, self.inputs, self.outputs, self._frame = (), {}, [], [], None
