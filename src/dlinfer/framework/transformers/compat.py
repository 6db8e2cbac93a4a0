"""The name transformers gives the KV cache argument: ``past_key_values`` up to 5.23, ``cache`` from 5.24 (the old
name still accepted, with a FutureWarning). The adaptor reads either and passes the current one."""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["cache_kwarg", "get_cache"]

_NAMES = ("cache", "past_key_values")


def cache_kwarg(model: Any = None) -> str:
    """``"cache"`` where the model's ``forward`` (default: ``LlamaForCausalLM``'s) takes it, else
    ``"past_key_values"``."""
    if model is None:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM
    return _cache_kwarg_of(model if isinstance(model, type) else type(model))


@functools.cache
def _cache_kwarg_of(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def get_cache(kwargs: dict[str, Any]) -> Any:
    """The cache passed in ``kwargs`` under either name (None if neither)."""
    for name in _NAMES:
        value = kwargs.get(name)
        if value is not None:
            return value
    return None
