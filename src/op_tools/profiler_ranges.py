"""``OpProfilerRanges``: the op tools' engine without a tool, so a profiler trace shows the API-level calls.

While any op tool is active and ``torch.profiler`` records, the engine wraps every operator call it
intercepts in a range named after the call (``torch.nn.functional.linear``, ``torch.Tensor.add``), with the
call's ``aten::`` ops (and on dipu its DIOPI kernels, ``diopiMm``) nested inside. This tool acts on no call:
it only keeps the engine installed, so those ranges appear when no other tool is active.
``ditorch profile`` uses it. With the profiler off, each call costs the engine's pass-through (about 1 µs).
"""

from __future__ import annotations

from op_tools.protocol import Phase
from op_tools.tool import OpTool

__all__ = ["OpProfilerRanges"]


class OpProfilerRanges(OpTool):
    """Keep the op tools' engine installed (acting on nothing) so profiler traces name every API call.

    ```python
    with OpProfilerRanges(), torch.profiler.profile() as prof:
        train_step()
    prof.export_chrome_trace("trace.json")  # ranges named torch.nn.functional.linear, ... inside
    ```
    """

    env_prefix = "OP_PROFILER_RANGES"
    phases = Phase.NONE

    def acts_on(self, name: str) -> bool:
        return False
