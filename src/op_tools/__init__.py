"""op_tools: per-operator tools for real training runs.

``OpCapture`` saves calls as replayable cases, ``OpObserve`` prints them, ``OpAutoCompare`` checks every call
against the CPU, ``OpOverflowCheck`` finds the ops that produce NaN/Inf, ``OpFallback`` runs ops on the CPU and
``OpDtypeCast`` runs them in another dtype, ``OpTimeMeasure`` times them; ``python -m
op_tools.run_op_from_data DIR`` (or ``ditorch replay DIR``) replays captured cases. Every tool works as a
context manager or with ``start()``/``stop()``, and :func:`apply_feature` applies one to functions outside
torch. ``OpTimeMeasure`` times every call, forward and backward. See docs/op_tools.md,
docs/op_tools_accuracy.md and docs/op_tools_speed.md.
"""

from diopi.steps import current_step, next_step
from op_tools.autocompare import OpAutoCompare
from op_tools.capture import OpCapture
from op_tools.dtype_cast import OpDtypeCast
from op_tools.fallback import OpFallback
from op_tools.features import apply_feature, register_feature
from op_tools.observe import OpObserve
from op_tools.overflow import OpOverflowCheck
from op_tools.profiler_ranges import OpProfilerRanges
from op_tools.random_on_cpu import OpRandomOnCPU
from op_tools.time_measure import OpTimeMeasure
from op_tools.tool import OpTool

__all__ = ["OpAutoCompare", "OpCapture", "OpDtypeCast", "OpFallback", "OpObserve", "OpOverflowCheck",
           "OpProfilerRanges", "OpRandomOnCPU", "OpTimeMeasure", "OpTool", "apply_feature", "current_step", "next_step",
           "register_feature"]
