"""The model's config objects and the implementation switches they carry (attention, experts), set and put back
exactly (each config object keeps its own value: a vision sub-config may differ from the text one)."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["all_configs", "config_value", "restore", "switch", "text_config"]


def config_value(config: Any, name: str, default: Any = None) -> Any:
    """``getattr`` that treats an attribute the config refuses to give globally (a per-layer value) as absent."""
    try:
        return getattr(config, name, default)
    except Exception:  # noqa: BLE001
        return default


def all_configs(model: nn.Module) -> list[Any]:
    """Every distinct config object of ``model``: its modules' ``config`` and their sub-configs."""
    from transformers import PreTrainedConfig

    seen: dict[int, Any] = {}
    todo = [getattr(m, "config", None) for m in model.modules()]
    while todo:
        config = todo.pop()
        if not isinstance(config, PreTrainedConfig) or id(config) in seen:
            continue
        seen[id(config)] = config
        todo.extend(getattr(config, key, None) for key in getattr(config, "sub_configs", {}) or {})
    return list(seen.values())


def switch(model: nn.Module, attr: str, value: Any) -> list[tuple[Any, Any]]:
    """Set ``attr`` (``_attn_implementation_internal``, ``_experts_implementation_internal``) on every config of
    ``model``; returns what :func:`restore` needs."""
    saved = [(config, getattr(config, attr, None)) for config in all_configs(model)]
    for config, _ in saved:
        setattr(config, attr, value)
    return [(config, old) for config, old in saved]


def restore(saved: list[tuple[Any, Any]], attr: str) -> None:
    """Undo :func:`switch`."""
    for config, old in saved:
        setattr(config, attr, old)


def text_config(model: nn.Module) -> Any:
    """The config of the text decoder (``get_text_config()`` where the config has one)."""
    config = model.config
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config
