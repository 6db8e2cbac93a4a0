"""``install()`` without a model: every transformers model constructed afterwards is installed.

The hook is ``PreTrainedModel.post_init``, which every transformers model calls at the end of its ``__init__``
(``from_config``, ``from_pretrained`` and plain construction alike). At that point the weights are not loaded yet
(``from_pretrained`` loads them after construction), so the model is only *armed*: its ``generate`` and a forward
pre-hook install it with the global options at the first ``generate()`` or forward call, then step aside. Only
models that can generate are armed; a model armed inside another one's construction (a sub-model) is disarmed when
the outer model is armed. ``uninstall()`` without a model puts ``post_init`` back and disarms every armed model.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle

__all__ = ["armed", "disable", "disarm", "enable", "enabled"]

_STATE: dict[str, Any] = {"install": None, "original": None}
_ARMED: weakref.WeakKeyDictionary[nn.Module, RemovableHandle] = weakref.WeakKeyDictionary()


def enabled() -> bool:
    """Whether models constructed now get installed."""
    return _STATE["install"] is not None


def armed(model: nn.Module) -> bool:
    """Whether ``model`` waits for its first call to be installed."""
    return model in _ARMED


def _arm(model: nn.Module) -> None:
    install = _STATE["install"]
    ref = weakref.ref(model)

    def first_use() -> nn.Module:
        m = ref()
        assert m is not None
        disarm(m)
        install(m)
        return m

    def generate(*args: Any, **kwargs: Any) -> Any:
        return first_use().generate(*args, **kwargs)

    def pre_forward(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        first_use()

    model.generate = generate
    _ARMED[model] = model.register_forward_pre_hook(pre_forward, with_kwargs=True)


def disarm(model: nn.Module) -> None:
    """Drop ``model``'s pending installation (its hook and ``generate``)."""
    handle = _ARMED.pop(model, None)
    if handle is not None:
        handle.remove()
        model.__dict__.pop("generate", None)


def enable(install: Callable[[nn.Module], None]) -> None:
    """Arm every model constructed from now on with ``install`` (called at its first use)."""
    from transformers import PreTrainedModel

    _STATE["install"] = install
    if _STATE["original"] is not None:
        return
    original = PreTrainedModel.post_init
    _STATE["original"] = original

    def post_init(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _STATE["install"] is not None and type(self).can_generate():
            for sub in self.modules():
                if sub is not self:
                    disarm(sub)
            _arm(self)
        return result

    PreTrainedModel.post_init = post_init  # type: ignore[method-assign]


def disable() -> None:
    """Put ``post_init`` back and disarm every armed model."""
    from transformers import PreTrainedModel

    if _STATE["original"] is not None:
        PreTrainedModel.post_init = _STATE["original"]  # type: ignore[method-assign]
    _STATE["original"] = _STATE["install"] = None
    for model in list(_ARMED.keys()):
        disarm(model)
