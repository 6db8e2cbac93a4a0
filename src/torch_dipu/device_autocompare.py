"""``DIPU_AUTOCOMPARE_OPS_LIST``: compare chosen ATen ops that reach the device against the CPU as they run.

(Stub: filled by issue 16's device-level auto-compare work.)"""

from __future__ import annotations

from torch_dipu.state import DipuState


def install(state: DipuState) -> None:
    """Start comparing the ops ``state.config.autocompare_ops`` names (nothing when the list is empty)."""


def set_autocompare_ops(entries: list[str] | str) -> None:
    """Replace the auto-compare list (same syntax as ``DIPU_AUTOCOMPARE_OPS_LIST``); empty switches it off."""
    raise NotImplementedError
