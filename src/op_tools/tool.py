"""The base of every op tool: lists, steps, device, start/stop and the context manager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from diopi.env import ConfigError
from diopi.steps import StepRange, current_step, install_optimizer_hook
from op_tools import config
from op_tools.engine import engine
from op_tools.op_filter import OpFilter
from op_tools.protocol import OpCall, Phase

__all__ = ["OpTool", "active_device_type"]


def active_device_type(explicit: str | torch.device | None = None) -> str:
    """The device a tool watches: the keyword, else ``OP_TOOLS_DEVICE``, else PyTorch's current accelerator
    (``torch.accelerator``), else the CPU."""
    value = explicit if explicit is not None else config.device_name()
    if value is not None:
        try:
            return torch.device(value).type
        except (RuntimeError, TypeError) as exc:
            raise ConfigError(f"{config.DEVICE_ENV} / device={value!r} is not a device: {exc}") from None
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return accelerator.type if accelerator is not None else "cpu"


class OpTool:
    """A tool applied to the operator calls made while it is active.

    Subclasses set :attr:`env_prefix` (``OP_CAPTURE`` reads ``OP_CAPTURE_LIST`` and
    ``OP_CAPTURE_DISABLE_LIST``), declare the phases they take part in (:attr:`phases`, see
    :mod:`op_tools.protocol`) and override the matching methods: :meth:`before`, :meth:`execute`,
    :meth:`after`, :meth:`on_backward`, :meth:`node_started` / :meth:`node_finished`. A subclass that declares
    no phases takes part in those whose methods it overrides (``execute`` with :attr:`executes`, the backward
    with :attr:`wants_backward`). Use as a context manager or with :meth:`start` / :meth:`stop`; tools nest.

    Keywords: ``ops`` / ``disable_ops`` (comma-separated or a list; whole-name regular expressions; the
    disable list wins; ``ops=""`` means none), ``device`` (which device's calls to act on), ``steps``
    (``"2-4"``, ``"5-"``; steps are counted by ``optimizer.step()`` and :func:`op_tools.next_step`).
    """

    env_prefix = "OP_TOOL"
    steps_env: str | None = None
    #: The phases of a call this tool takes part in; an instance may narrow them (``backward=False``).
    phases: Phase = Phase.NONE
    wants_backward = False  # for subclasses that declare no phases: take part in Phase.BACKWARD
    executes = False  # for subclasses that declare no phases: take part in Phase.EXECUTE
    backward_needs = "meta"  # what on_backward gets per gradient: "meta", "finite", "stats" or "data" (host copies)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "phases" in cls.__dict__:
            return
        inferred = Phase.NONE
        for phase, method in ((Phase.BEFORE, "before"), (Phase.AFTER, "after")):
            if getattr(cls, method) is not getattr(OpTool, method):
                inferred |= phase
        if cls.executes:
            inferred |= Phase.EXECUTE
        if cls.wants_backward:
            inferred |= Phase.BACKWARD
        if cls.node_started is not OpTool.node_started:
            inferred |= Phase.BACKWARD_NODES
        cls.phases = inferred | cls.phases

    def __init__(self, *, ops: str | list[str] | None = None, disable_ops: str | list[str] | None = None,
                 device: str | torch.device | None = None, steps: Any = None) -> None:
        # Explicit keywords win over the environment, which is read now and again at each start().
        self.keep_explicit(ops=ops, disable_ops=disable_ops, device=device, steps=steps)
        self.config = self.read_config()
        self._apply_common_config(self.config)
        self.active = False
        self.opened = False
        install_optimizer_hook()

    @property
    def name(self) -> str:
        return type(self).__name__

    # -- lifecycle -------------------------------------------------------------------------------------
    def open(self) -> None:
        """Prepare output (files, threads) without intercepting anything; :func:`op_tools.apply_feature`
        uses this."""
        if not self.opened:
            self.on_start()
            self.opened = True

    def close(self) -> None:
        """Finish output (the counterpart of :meth:`open`)."""
        if self.opened and not self.active:
            self.opened = False
            self.on_stop()

    def start(self) -> OpTool:
        """Begin acting on every torch call (idempotent). Re-reads the tool's environment variables
        (:meth:`reconfigure`), so a tool reused across starts follows the values in force at each."""
        if not self.active:
            self.reconfigure()
            self.open()
            self.active = True
            engine.activate(self)
        return self

    def stop(self) -> None:
        """Stop acting on calls and finish pending output (idempotent)."""
        if self.active:
            engine.deactivate(self)
            self.active = False
            self.close()

    end = stop  # the seeds' name

    def __enter__(self) -> OpTool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- settings (op_tools.config) ---------------------------------------------------------------------
    def read_config(self) -> config.ToolConfig:
        """This tool's settings from the environment; a subclass names its own reader
        (``read_config = staticmethod(config.capture_config)``)."""
        return config.tool_config(self.env_prefix, self.steps_env)

    def keep_explicit(self, **keywords: Any) -> None:
        """Remember keyword arguments the tool was given: each that is not None wins over the environment's value
        (:meth:`explicit`) now and at every later start()."""
        self.__dict__.setdefault("_explicit", {}).update(keywords)

    def explicit(self, name: str, from_env: Any, parse: Callable[[Any], Any] | None = None) -> Any:
        """The keyword ``name`` the tool was given (through ``parse``), or ``from_env`` where it was None."""
        given = self._explicit.get(name)
        if given is None:
            return from_env
        return given if parse is None else parse(given)

    def _apply_common_config(self, cfg: config.ToolConfig) -> None:
        self.filter = OpFilter(self.env_prefix, self._explicit["ops"], self._explicit["disable_ops"],
                               env_lists=(cfg.ops, cfg.disable_ops), owner=type(self).__name__)
        self.device_type = active_device_type(self.explicit("device", cfg.device))
        self.steps = StepRange(self.explicit("steps", cfg.steps, lambda given: StepRange(given, source="steps")),
                               source=self.steps_env or "steps")  # an error names the keyword or the variable

    def apply_config(self, cfg: config.ToolConfig) -> None:
        """Take the tool's own settings from ``cfg`` under its explicit keywords (subclasses; called at the
        end of their ``__init__`` and by :meth:`reconfigure`)."""

    def reconfigure(self) -> None:
        """Read the environment again (at each :meth:`start`, never per call); explicit keywords still win."""
        self.config = self.read_config()
        self._apply_common_config(self.config)
        self.apply_config(self.config)
        engine.invalidate()

    # -- decisions -------------------------------------------------------------------------------------
    def acts_on(self, name: str) -> bool:
        """Whether this tool acts on a call of ``name`` now (lists and step range; device is checked by the
        engine)."""
        if not self.steps.unbounded and current_step() not in self.steps:
            return False
        return self.filter(name)

    # -- hooks for subclasses --------------------------------------------------------------------------
    def on_start(self) -> None:
        """Called by :meth:`start`."""

    def on_stop(self) -> None:
        """Called by :meth:`stop`."""

    def before(self, call: OpCall) -> Any:
        """(``Phase.BEFORE``) Before the call runs; the return value is handed to the tool's later phases of
        the call, and None means the tool sits the call out. :attr:`OpCall.ran` is ``Ran.BEFORE_TOOLS`` when
        the call has run already (it had no device input and made a device tensor)."""
        return None

    def execute(self, call: OpCall, state: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        """(``Phase.EXECUTE``) Run the call in place of ``func(*args, **kwargs)`` (the innermost such tool
        wins; never for a call that ran before the tools). Runs with autograd as the user has it."""
        return func(*args, **kwargs)

    def after(self, call: OpCall, state: Any, output: Any) -> None:
        """(``Phase.AFTER``) After the call returned ``output``; :attr:`OpCall.ran` says how it ran."""

    def on_backward(self, call: OpCall, state: Any, grad_inputs: dict[int, Any], grad_outputs: dict[int, Any]) -> None:
        """(``Phase.BACKWARD``, ``Phase.BACKWARD_NODES``) After the first backward pass that reached this call:
        gradients by input and output index (host copies
        with ``backward_needs == "data"``, statistics dicts with ``"stats"`` (with ``"finite"``: exact NaN/Inf
        counts, and the other statistics only for gradients that have NaN or Inf), else
        :class:`~op_tools.autograd_hooks.GradMeta`)."""

    def node_started(self, call: OpCall, state: Any, node: int) -> None:
        """(``Phase.BACKWARD_NODES``) Autograd node number ``node`` of the call is about to run."""

    def node_finished(self, call: OpCall, state: Any, node: int) -> None:
        """(``Phase.BACKWARD_NODES``) Autograd node number ``node`` of the call has run."""
