"""dlinfer's operator interface (op mode); each function calls the ``torch.ops.dlinfer`` operator of the same
name (graph mode). Conventions: :mod:`dlinfer.ops.llm` and docs/dlinfer.md."""

from .llm import *  # noqa: F403
from .llm import __all__  # noqa: F401
