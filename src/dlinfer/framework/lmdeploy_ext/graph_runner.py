"""Which graph runner LMDeploy's engine gets: CUDA graphs where the device captures them, else eager."""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["build_graph_runner", "device_captures_graphs"]

_log = logging.getLogger("dlinfer")
_warned: set[str] = set()


def device_captures_graphs() -> bool:
    """Whether ``torch.cuda`` can capture graphs here (real CUDA; a device ``import ditorch`` maps to ``cuda``
    without graph capture says no)."""
    if not (hasattr(torch.cuda, "CUDAGraph") and torch.cuda.is_available()):
        return False
    try:
        torch.cuda.graph_pool_handle()
    except Exception:  # ditorch answers NotSupportedOnDevice; a CPU build answers RuntimeError
        return False
    return True


def build_graph_runner(model: torch.nn.Module, model_config: Any, cache_config: Any, backend_config: Any,
                       device: torch.device) -> Any:
    """LMDeploy's ``CUDAGraphRunner`` when graph mode is asked for and the device captures graphs; otherwise
    LMDeploy's eager ``GraphRunner`` (a warning, once per device type, when graph mode was asked for)."""
    from lmdeploy.pytorch.backends.graph_runner import GraphRunner

    eager = bool(getattr(backend_config, "eager_mode", True))
    if not eager and device_captures_graphs():
        from lmdeploy.pytorch.backends.cuda.graph_runner import CUDAGraphRunner

        return CUDAGraphRunner(model, model_config, cache_config, backend_config, device)
    if not eager:
        kind = getattr(backend_config, "device_type", str(device))
        if kind not in _warned:
            _warned.add(kind)
            _log.warning("dlinfer: the %s device (torch %s) cannot capture CUDA graphs; LMDeploy's graph mode "
                         "runs the model eagerly", kind, torch.device(device).type)
    return GraphRunner(model, model_config, cache_config, backend_config, device)
