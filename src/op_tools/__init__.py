"""op_tools: per-operator tools for real training runs.

``OpCapture`` saves calls as replayable cases, ``OpObserve`` prints them; ``python -m
op_tools.run_op_from_data DIR`` (or ``ditorch replay DIR``) replays captured cases. Every tool works as a
context manager or with ``start()``/``stop()``, and :func:`apply_feature` applies one to functions outside
torch. See docs/op_tools.md.
"""

from op_tools.capture import OpCapture
from op_tools.features import apply_feature, register_feature
from op_tools.observe import OpObserve
from op_tools.steps import current_step, next_step
from op_tools.tool import OpTool

__all__ = ["OpCapture", "OpObserve", "OpTool", "apply_feature", "current_step", "next_step", "register_feature"]
