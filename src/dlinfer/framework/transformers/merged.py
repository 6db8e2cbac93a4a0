"""One matrix multiply for several ``nn.Linear`` layers that read the same input (q/k/v, gate/up).

The layers' weights (and biases) are copied once into one tensor and each layer's parameter becomes a view of its
rows: no memory is added, ``state_dict``, in-place updates and ``load_state_dict`` keep working, and the parameter
objects stay the same. Whenever a layer's storage moved since (``model.to(...)``, a ``.data`` assignment) the
views are made again before the next eager multiply, so the merged tensor never serves stale weights. Under
``torch.compile`` the merge the eager steps made is used as long as its dtype and device are the layers' (a
storage check would break the graph); otherwise the layers multiply one by one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["merged_projection"]


def _mergeable(layers: list[nn.Module]) -> bool:
    if not all(type(layer) is nn.Linear for layer in layers):  # subclasses (LoRA, quantized) keep their forward
        return False
    weights = [layer.weight for layer in layers]
    if len({(w.dtype, w.device, w.shape[1]) for w in weights}) != 1:
        return False
    biases = [layer.bias for layer in layers]
    return all(b is None for b in biases) or all(b is not None for b in biases)


def _merge(layers: list[nn.Module]) -> tuple[Tensor, Tensor | None]:
    with torch.no_grad():
        weight = torch.cat([layer.weight.detach() for layer in layers])
        bias = None if layers[0].bias is None else torch.cat([layer.bias.detach() for layer in layers])
        start = 0
        for layer in layers:
            rows = layer.weight.shape[0]
            layer.weight.data = weight[start:start + rows]
            if bias is not None:
                layer.bias.data = bias[start:start + rows]
            start += rows
    return weight, bias


def _pointers(layer: nn.Module) -> tuple[int, int]:
    params = layer._parameters
    bias = params.get("bias")
    return params["weight"].data_ptr(), 0 if bias is None else bias.data_ptr()


def merged_projection(owner: nn.Module, names: tuple[str, ...]) -> tuple[Tensor, Tensor | None, tuple[int, ...]] | None:
    """``(weight, bias, sizes)``: ``weight``'s (and ``bias``'s) row blocks are ``owner``'s Linear layers ``names``
    (in that order), ``sizes`` their output sizes; or None when they cannot share one multiply (another Linear
    class, dtypes, devices, input sizes or biases that differ)."""
    state = owner.__dict__.get("_dlinfer_merged")
    if torch.compiler.is_compiling():  # traced: the eager steps merged (or not) already; no storage checks
        if state is None or state[0] != names:
            return None
        first = getattr(owner, names[0]).weight
        if state[1].dtype != first.dtype or state[1].device != first.device:
            return None  # converted since the merge (model.to): the layers' own weights
        return state[1], state[2], state[4]
    modules = owner._modules
    if state is not None and state[0] == names:  # the layers' parameters still the views made (every call: cheap)
        for name, pointers in zip(names, state[3], strict=True):
            layer = modules.get(name)
            if layer is None or _pointers(layer) != pointers:
                break
        else:
            return state[1], state[2], state[4]
    layers = [modules.get(name) for name in names]
    if not _mergeable(layers):
        owner.__dict__["_dlinfer_merged"] = None
        return None
    weight, bias = _merge(layers)
    sizes = tuple(layer.weight.shape[0] for layer in layers)
    owner.__dict__["_dlinfer_merged"] = (names, weight, bias, tuple(map(_pointers, layers)), sizes)
    return weight, bias, sizes
