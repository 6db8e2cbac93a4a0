"""``model.cuda()`` keeps every parameter the same Python object on the vendor's device, as on CUDA.

On CUDA, ``Module._apply`` (behind ``to``, ``cuda``, ``half``) moves a parameter in place (``param.data = moved``):
weights shared between modules (tied embeddings and output layer) stay shared, an optimizer made before the move
keeps updating the model, hooks survive. PyTorch takes that path only between backends whose tensors it can
shallow-copy into each other; for most PrivateUse1 plugins' tensors it makes a new ``Parameter`` per module, so a
tied model silently trains two copies of the shared weight and its losses part from the CPU's with no error.

:func:`install` wraps ``Module._apply``: after PyTorch's own conversion, a parameter that PyTorch replaced in a move
onto or off the device takes over its replacement's tensor in place (``torch.utils.swap_tensors``) and goes back
into the module, so the second module sharing it finds it already moved. Moves that do not involve the device are
left exactly as PyTorch made them; a plugin that keeps identity itself (every move in place) is never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True


def install(patches: Patches, device_type: str) -> None:
    """Wrap ``torch.nn.Module._apply`` so that parameters keep their identity across moves to ``device_type``."""
    original = torch.nn.Module._apply

    def _apply(self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        before = [(key, p) for key, p in self._parameters.items() if p is not None]
        result = original(self, fn, recurse)
        for key, old in before:
            new = self._parameters.get(key)
            if new is None or new is old or device_type not in (old.device.type, new.device.type):
                continue
            try:
                torch.utils.swap_tensors(old, new)
            except RuntimeError:  # the old tensor is referenced from C++ (a view, a saved tensor): keep PyTorch's
                continue
            self._parameters[key] = old
        return result

    _apply.__wrapped__ = original  # type: ignore[attr-defined]
    patches.set(torch.nn.Module, "_apply", _apply)
