"""``supported(model)``: what install() would do to a model, without leaving it installed."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from .probe import ClassVerdict

__all__ = ["Support", "supported"]


@dataclass
class Support:
    """``refused``: the one-line reason the model cannot run over the paged cache (None: it can); ``classes``: per
    candidate module class, the dlinfer forward it gets or why it stays stock."""

    model: str
    refused: str | None
    classes: list[ClassVerdict] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.model}: " + (f"refused: {self.refused}" if self.refused else "runs over the paged cache")]
        for c in self.classes:
            what = f"replaced by {c.variant}" if c.variant else f"kept stock: {c.reason}"
            lines.append(f"  {c.name} ({c.kind}, {c.instances}x): {what}")
        return "\n".join(lines)


def supported(model: nn.Module) -> Support:
    """Install ``model`` (probe, swaps, a short trial forward) and put it back; report what was replaced, what
    stays stock and why, or the one-line refusal. An installed model is reported as it is."""
    from .install import install, installed, uninstall, verdicts

    name = type(model).__name__
    if installed(model):
        return Support(name, None, verdicts(model) or [])
    try:
        install(model)
    except ValueError as exc:
        return Support(name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    try:
        return Support(name, None, verdicts(model) or [])
    finally:
        uninstall(model)
