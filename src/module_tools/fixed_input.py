"""Fixed-input mode: replay each module call of the test run on the reference run's inputs and parameters.

(Being written: see docs/module_tools.md, "Fixed-input mode".)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["FixedInputReplay"]


class FixedInputReplay:
    """Replays module calls of a live model on the inputs and parameters of a full reference dump."""

    def __init__(self, ref: str | Path | Any, model: torch.nn.Module, paths: dict[int, str]) -> None:
        from .dump_reader import load_dump

        self.ref = ref if hasattr(ref, "forward") else load_dump(ref)
        self.model = model
        self.paths = paths
        self.busy = False

    def before(self, module: torch.nn.Module, path: str, step: int, call: int) -> None:
        """A live call starts (its random state is kept for the replay)."""

    def after(self, module: torch.nn.Module, path: str, step: int, call: int, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
        """The replay's tensors by direction (``forward``: ``output.<i>``; ``backward``: ``grad_input.<i>``,
        ``grad_param.<name>``)."""
        return {}
