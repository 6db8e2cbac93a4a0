"""``DIPU_MEM_CHECK``: record every device allocation and free; report blocks still alive at exit.

(Stub: filled by issue 16's memory-checker work.)"""

from __future__ import annotations

from torch_dipu.state import DipuState


def install(state: DipuState) -> None:
    """Start the checker when ``state.config.mem_check`` is set."""
