"""``torch.distributed`` with backend ``"nccl"`` runs on the adapter's collective backend.

``init_process_group`` and ``new_group`` translate ``nccl`` (also inside ``"cuda:nccl,cpu:gloo"``) to
``adapter.dist_backend`` and a cuda ``device_id`` to the adapter's device. When that backend is ``gloo``,
which only handles CPU (and CUDA) tensors, the common collectives stage the device's tensors through CPU
copies and copy the results back in place; CPU tensors go straight through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ditorch.mocking.device_strings import Translator
from ditorch.mocking.patches import Patches

#: op_tools reports the user's line, not these wrappers, as an operator's call site.
__call_site_transparent__ = True

#: Collectives staged through the CPU when the backend is gloo.
STAGED = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv",
    "isend", "irecv", "broadcast_object_list", "all_gather_object",
)


def translate_backend(backend: Any, dist_backend: str, device_type: str) -> Any:
    """``"nccl"`` -> ``dist_backend``; ``"cuda:nccl,cpu:gloo"`` -> ``"<device_type>:<dist_backend>,cpu:gloo"``."""
    if not isinstance(backend, str) or "nccl" not in backend.lower():
        return backend
    items = []
    for item in backend.split(","):
        device, sep, name = item.strip().rpartition(":")
        name = dist_backend if name.lower() == "nccl" else name
        device = device_type if device == "cuda" else device
        items.append(f"{device}{sep}{name}")
    out = ",".join(items)
    if ":" in out and dist_backend == "gloo":  # gloo gets CPU tensors (staged): one gloo group for all
        return "gloo"
    return out


def install(patches: Patches, adapter: Any, tr: Translator) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    dist_backend, device_type = adapter.dist_backend, adapter.device_type

    def backend_arg(fn: Callable[..., Any], position: int) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) > position:
                args = (*args[:position], translate_backend(args[position], dist_backend, device_type),
                        *args[position + 1:])
            elif "backend" in kwargs:
                kwargs["backend"] = translate_backend(kwargs["backend"], dist_backend, device_type)
            if kwargs.get("device_id") is not None:
                kwargs["device_id"] = tr.device(kwargs["device_id"])
                if dist_backend == "gloo":  # gloo binds no device; the tensors it sees are CPU copies
                    kwargs.pop("device_id")
            return fn(*args, **kwargs)

        return call

    patches.set(dist, "init_process_group", backend_arg(dist.init_process_group, 0))
    patches.set(dist, "new_group", backend_arg(dist.new_group, 2))
    if dist_backend == "gloo":
        for name in STAGED:
            fn = getattr(dist, name, None)
            if fn is not None:
                patches.set(dist, name, _staged(fn, device_type))


def _staged(fn: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        staged: list[tuple[torch.Tensor, torch.Tensor]] = []

        def stage(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                if torch._C.TensorBase.device.__get__(value).type != device_type:
                    return value
                host = value.detach().to("cpu", copy=True)
                staged.append((value, host))
                return host
            if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
                return [stage(v) for v in value]
            return value

        args = tuple(stage(a) for a in args)
        kwargs = {k: stage(v) for k, v in kwargs.items()}
        if not staged:
            return fn(*args, **kwargs)
        work = fn(*args, **kwargs)
        if work is not None and hasattr(work, "wait"):
            work.wait()  # results must be on the host before they are copied back
        with torch.no_grad():
            for device_tensor, host in staged:
                device_tensor.copy_(host)
        return work

    return collective
