"""The patches of LMDeploy's dlinfer op backends (``lmdeploy.pytorch.backends.dlinfer.<device>``)."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from .graph_runner import build_graph_runner
from .step_context import build_attention_metadata

__all__ = ["DEVICE_BACKENDS", "patch_backends"]

#: LMDeploy device type -> (module, class) of its dlinfer op backend patched here. Ascend keeps upstream's own
#: backend: its cache layout and graph mode are made for torch_npu's kernels.
DEVICE_BACKENDS: dict[str, tuple[str, str]] = {
    "maca": ("lmdeploy.pytorch.backends.dlinfer.maca.op_backend", "MacaOpsBackend"),
    "camb": ("lmdeploy.pytorch.backends.dlinfer.camb.op_backend", "CambOpsBackend"),
}
_PATCHED: list[type] = []


def _block_shape(block_size: int, num_heads: int, head_size: int, dtype: torch.dtype) -> tuple[int, ...]:
    """dlinfer's paged cache: ``(num_blocks, block_size, num_kv_heads, head_dim)``."""
    return (block_size, num_heads, head_size)


def _update_step_context(cls: type, step_context: Any) -> Any:
    step_context.attn_metadata = build_attention_metadata(cls.get_attention_metadata_cls(), step_context)
    return step_context


def patch_backends() -> list[type]:
    """Patch every LMDeploy dlinfer backend of :data:`DEVICE_BACKENDS` that this LMDeploy has (once)."""
    if _PATCHED:
        return list(_PATCHED)
    for module_name, class_name in DEVICE_BACKENDS.values():
        try:
            backend = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue  # an LMDeploy release without this device type
        backend.update_step_context = classmethod(_update_step_context)
        backend.build_graph_runner = staticmethod(build_graph_runner)
        backend.get_k_block_shape = staticmethod(_block_shape)
        backend.get_v_block_shape = staticmethod(_block_shape)
        _PATCHED.append(backend)
    return list(_PATCHED)
