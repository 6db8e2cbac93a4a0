"""A module call as a case: the module's state recorded in ``case.json``, and the module rebuilt from it for replay.

A module dump (:class:`module_tools.ModuleDump`) writes every forward call of a module as a case
(:mod:`diopi.case_format`) whose ``module`` section holds what calling the module needs besides its arguments: its
class, its ``training`` flag, its plain attributes (numbers, strings, dtypes, tuples; functions and classes by
their import name; small objects such as a transformers config as their class and attributes), its parameters and
buffers (tensors of the case, keys ``p<n>``) and its submodules, recursively. A shared submodule or a tied
parameter is stored once and shared again when rebuilt.

:func:`rebuild_module` builds the module back without running its ``__init__`` (``cls.__new__`` and
``nn.Module.__init__``, then the recorded state), so no constructor arguments are needed. Like replay's operators,
classes and functions are resolved only inside ``torch`` unless their package is allowed (``--allow_module``).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from diopi import case_format as cf
from diopi.tensor_walk import tensors_in
from op_tools.naming import locate

__all__ = ["ModuleCall", "encode_module", "rebuild_module"]

#: The attributes ``nn.Module.__init__`` sets: rebuilt by it, not recorded.
_BASE_ATTRIBUTES = frozenset(vars(torch.nn.Module())) - {"training"}
_MAX_DEPTH = 6


def _import_name(obj: Any) -> str | None:
    """``module.qualname`` of a function or class that can be imported back, else None."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    return f"{module}.{qualname}"


def _encode_attribute(value: Any, enc: cf.Encoder, depth: int = 0) -> Any:
    opaque = len(enc.opaque)
    encoded = enc.encode(value)
    if len(enc.opaque) == opaque:
        return encoded
    del enc.opaque[opaque:]  # try the forms only a module's state needs
    name = _import_name(value) if callable(value) else None
    if name is not None:
        return {"callable": name}
    if isinstance(value, (set, frozenset)) and depth < _MAX_DEPTH:
        return {"set": [_encode_attribute(v, enc, depth + 1) for v in value]}
    if isinstance(value, (list, tuple)) and depth < _MAX_DEPTH:
        items = [_encode_attribute(v, enc, depth + 1) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    if isinstance(value, dict) and depth < _MAX_DEPTH:
        if all(isinstance(k, str) for k in value):
            return {"dict": {k: _encode_attribute(v, enc, depth + 1) for k, v in value.items()}}
        return {"items": [[_encode_attribute(k, enc, depth + 1), _encode_attribute(v, enc, depth + 1)]
                          for k, v in value.items()]}
    cls_name = _import_name(type(value))
    if cls_name is not None and hasattr(value, "__dict__") and depth < _MAX_DEPTH:
        return {"object": cls_name, "state": {k: _encode_attribute(v, enc, depth + 1) for k, v in vars(value).items()}}
    return enc.encode(value)  # opaque again, recorded as such: the case says what could not be stored


def encode_module(module: torch.nn.Module, enc: cf.Encoder, _seen: dict[int, str] | None = None,
                  _path: str = "") -> dict[str, Any]:
    """The JSON-ready state of ``module`` and its submodules; its tensors go to ``enc`` (their data as they are now)."""
    seen = {} if _seen is None else _seen
    if id(module) in seen:
        return {"same_as": seen[id(module)]}
    seen[id(module)] = _path
    cls_name = _import_name(type(module))
    attributes = {k: _encode_attribute(v, enc) for k, v in vars(module).items() if k not in _BASE_ATTRIBUTES}
    return {
        "class": cls_name or f"{type(module).__module__}.{type(module).__qualname__}",
        "training": module.training,
        "attributes": attributes,
        "parameters": {k: None if p is None else enc.encode(p) for k, p in module._parameters.items()},
        "buffers": {k: None if b is None else enc.encode(b) for k, b in module._buffers.items()},
        "non_persistent": sorted(module._non_persistent_buffers_set),
        "children": {k: None if c is None else encode_module(c, enc, seen, f"{_path}.{k}" if _path else k)
                     for k, c in module._modules.items()},
    }


def _resolve(name: str, allowed_modules: tuple[str, ...] | list[str], what: str) -> Any:
    """The class or function ``name`` names, inside torch or an allowed package only."""
    if not (name.startswith("torch.") or any(name == m or name.startswith(m + ".") for m in allowed_modules)):
        top = name.split(".", 1)[0]
        raise LookupError(f"{what} {name!r} is outside torch; replay builds modules only from torch unless the "
                          f"package is allowed (--allow_module {top})")
    try:
        return getattr(*locate(name))
    except (ImportError, AttributeError, ValueError) as exc:
        raise LookupError(f"cannot import {what} {name!r} ({exc})") from None


class _Decoder:
    def __init__(self, tensors: dict[str, torch.Tensor], allowed_modules: tuple[str, ...] | list[str]) -> None:
        self.tensors = tensors
        self.allowed = allowed_modules
        self.modules: dict[str, torch.nn.Module] = {}
        self.parameters: dict[str, torch.nn.Parameter] = {}

    def value(self, struct: Any, where: str) -> Any:
        if isinstance(struct, list):
            return [self.value(v, where) for v in struct]
        if isinstance(struct, dict) and len(struct) in (1, 2):
            if "callable" in struct:
                return _resolve(struct["callable"], self.allowed, "function")
            if "object" in struct:
                cls = _resolve(struct["object"], self.allowed, "class")
                obj = cls.__new__(cls)
                obj.__dict__.update({k: self.value(v, f"{where}.{k}") for k, v in struct["state"].items()})
                return obj
            if "tuple" in struct and "type" not in struct:
                return tuple(self.value(v, where) for v in struct["tuple"])
            if "dict" in struct:
                return {k: self.value(v, f"{where}.{k}") for k, v in struct["dict"].items()}
            if "set" in struct:
                return {self.value(v, where) for v in struct["set"]}
            if "items" in struct:
                return {self.value(k, where): self.value(v, where) for k, v in struct["items"]}
            if "opaque" in struct:
                raise cf.NotReplayableError(f"attribute {where} of type {struct['opaque']} was not recorded "
                                            f"({struct.get('repr', '')})")
        return cf.decode_value(struct, self.tensors)

    def parameter(self, struct: dict[str, Any]) -> torch.nn.Parameter:
        key = struct["tensor"]
        param = self.parameters.get(key)
        if param is None:  # a tied parameter is one object again
            t = self.tensors[key]
            param = self.parameters[key] = torch.nn.Parameter(t, requires_grad=t.requires_grad)
        return param

    def module(self, state: dict[str, Any], path: str) -> torch.nn.Module:
        if "same_as" in state:
            return self.modules[state["same_as"]]
        cls = _resolve(state["class"], self.allowed, "module class")
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise LookupError(f"{state['class']!r} is not a torch.nn.Module class")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        self.modules[path] = module
        label = path or cls.__name__
        for k, v in state["attributes"].items():
            module.__dict__[k] = self.value(v, f"{label}.{k}")
        module.training = bool(state["training"])
        for k, v in state["parameters"].items():
            module._parameters[k] = None if v is None else self.parameter(v)
        for k, v in state["buffers"].items():
            module._buffers[k] = None if v is None else self.tensors[v["tensor"]]
        module._non_persistent_buffers_set = set(state["non_persistent"])
        for k, child in state["children"].items():
            module._modules[k] = None if child is None else self.module(child, f"{path}.{k}" if path else k)
        return module


def rebuild_module(case: cf.LoadedCase, allowed_modules: tuple[str, ...] | list[str] = ()) -> torch.nn.Module:
    """The module of a module-call case, on the CPU, with the parameters and buffers it had at the call."""
    record = case.record
    tensors = {}
    for key, meta in record["tensors"].items():
        if key.startswith("p"):
            t = cf.rebuild_tensor(meta, case.data[key], "cpu")
            tensors[key] = t.requires_grad_(True) if meta.get("requires_grad") and t.is_floating_point() else t
    with torch.no_grad():
        return _Decoder(tensors, allowed_modules).module(record["module"]["state"], "")


class ModuleCall:
    """A rebuilt module as replay calls it: moved to the device of its first tensor argument, and to float64 when
    that argument is float64 (replay's float64 reference); one copy per (device, float64)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.copies: dict[tuple[torch.device, bool], torch.nn.Module] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        first = next(iter(tensors_in((args, kwargs))), None)
        device = first.device if first is not None else torch.device("cpu")
        wide = first is not None and first.dtype == torch.float64
        key = (device, wide)
        module = self.copies.get(key)
        if module is None:
            module = copy.deepcopy(self.module).to(device)
            if wide:
                module = module.double()
            self.copies[key] = module
        return module(*args, **kwargs)
