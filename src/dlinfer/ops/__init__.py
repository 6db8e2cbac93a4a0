"""dlinfer's operator interface (op mode); each function calls the ``torch.ops.dlinfer`` operator of the same
name (graph mode). Conventions: :mod:`dlinfer.ops.llm` and docs/dlinfer.md."""

from typing import Any

from .llm import *  # noqa: F403
from .llm import __all__  # noqa: F401


def __getattr__(name: str) -> Any:
    raise AttributeError(f"dlinfer.ops has no operator {name!r}: it is not implemented by dlinfer (its operators: "
                         f"{', '.join(__all__)})")
