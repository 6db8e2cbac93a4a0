"""``DIPU_DUMP_OP_ARGS``: print every device op with its DIOPI function and, at higher levels, its arguments.

(Stub: filled by issue 16's argument-dump work.)"""

from __future__ import annotations

from torch_dipu.state import DipuState


def install(state: DipuState) -> None:
    """Start dumping at the level ``DIPU_DUMP_OP_ARGS`` had at import and follow its later changes."""


def set_dump_op_args(level: int) -> None:
    """Set the dump level (0-3) from the next op on, as ``os.environ["DIPU_DUMP_OP_ARGS"] = str(level)`` does."""
    raise NotImplementedError
