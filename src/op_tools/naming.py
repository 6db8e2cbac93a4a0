"""What an intercepted function is called and what kind of call it is.

Names are the seeds': ``torch.Tensor.add``, ``torch.nn.functional.linear``, ``torch.cat``. Attribute
access (``torch.Tensor.shape.__get__``), printing, autograd entry points and metadata queries are not
operators: the tools never act on them.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import resolve_name

__all__ = ["COLLECTIVES", "QUIET_WRITERS", "RANDOM_WHEN", "UNINITIALIZED", "FunctionInfo", "api_names",
           "draws_random", "is_api_name",
           "function_info", "info_for_name", "is_collective_name", "is_inplace_name", "is_random_name",
           "is_uninitialized_name", "locate", "resolve_function"]

# Calls that move no data through an operator; never intercepted.
_NON_OPS = {
    "backward", "register_hook", "register_post_accumulate_grad_hook", "retain_grad", "requires_grad_",
    "__repr__", "__str__", "__format__", "__hash__", "__len__", "__bool__", "__iter__", "__reversed__",
    "__contains__", "__reduce_ex__", "__reduce__", "__deepcopy__", "__getstate__", "__setstate__",
    "__array__", "__array_wrap__", "__dlpack__", "__dlpack_device__", "__dir__", "__sizeof__",
    "__torch_function__", "__torch_dispatch__", "_make_subclass",
    "dim", "ndimension", "size", "stride", "numel", "nelement", "storage_offset", "element_size",
    "is_contiguous", "is_complex", "is_floating_point", "is_signed", "is_inference", "is_set_to",
    "is_shared", "is_pinned", "is_nonzero", "data_ptr", "untyped_storage", "storage", "_typed_storage",
    "get_device", "has_names", "is_coalesced", "_is_view", "share_memory_", "numpy", "tolist",
    "_version", "is_same_size", "_base", "_grad_fn",
}
_NON_OP_FUNCTIONS = {
    "torch.autograd.backward", "torch.autograd.grad", "torch.is_tensor", "torch.is_storage",
    "torch.numel", "torch.is_complex", "torch.is_floating_point", "torch.is_nonzero", "torch.is_grad_enabled",
    "torch.is_inference_mode_enabled", "torch.get_default_dtype", "torch.result_type", "torch.can_cast",
    "torch.promote_types", "torch._has_compatible_shallow_copy_type",
}
_INPLACE_DUNDERS = {
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__iand__",
    "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__", "__idiv__",
}
#: Functions that write into an input neither their name nor a keyword announces, and without bumping its
#: version counter: normalization in training mode updates its running statistics.
QUIET_WRITERS = frozenset({
    "torch.nn.functional.batch_norm", "torch.batch_norm", "torch.native_batch_norm",
    "torch._native_batch_norm_legit", "torch.nn.functional.instance_norm", "torch.instance_norm",
})
_RANDOM = re.compile(
    r"(rand|randn|randint|randperm|rand_like|randn_like|randint_like|bernoulli_?|multinomial|normal_?|"
    r"uniform_|exponential_|geometric_|cauchy_|log_normal_|random_|poisson|rrelu_?|gumbel_softmax|"
    r"\w*dropout\w*|native_dropout|fractional_max_pool[23]d(_with_indices)?)"
)


#: Functions that draw random numbers only when an argument says so: short name -> (keyword, position) of
#: their dropout probability (random when it is positive).
RANDOM_WHEN = {"scaled_dot_product_attention": ("dropout_p", 4), "multi_head_attention_forward": ("dropout_p", 10)}

#: Factories whose results are uninitialized memory: their values mean nothing (not compared, not checked).
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})

#: The ``torch.distributed`` functions the engine sees while any tool is active, named
#: ``torch.distributed.<function>`` (those the installed torch has; :mod:`op_tools.collectives`).
COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_single",
               "all_gather_coalesced", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
               "reduce_scatter_single", "broadcast", "broadcast_object_list", "reduce", "all_to_all",
               "all_to_all_single", "gather", "gather_object", "scatter", "scatter_object_list", "barrier",
               "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
               "recv_object_list")
_C10D = "torch.distributed.distributed_c10d."  # c10d's functions reach a torch function mode under this name
# Operator namespaces whose calls talk to other ranks (functional collectives, c10d's own operators).
_COLLECTIVE_NAMESPACES = ("_c10d_functional.", "c10d_functional.", "_c10d_functional_autograd.", "c10d.")
_COLLECTIVE_NAMES = frozenset(f"torch.distributed.{n}" for n in COLLECTIVES)


@dataclass(frozen=True)
class FunctionInfo:
    """What the engine knows about one intercepted function."""

    name: str
    is_op: bool
    inplace: bool
    random: bool
    uninitialized: bool = False
    random_when: tuple[str, int] | None = None  # random only when this (keyword, position) argument is > 0
    collective: bool = False  # talks to other ranks: never run again, on the CPU or elsewhere


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def is_inplace_name(name: str) -> bool:
    """``add_``, ``__iadd__``, ``__setitem__``: calls that write into an argument by their name."""
    short = _short(name)
    return short in _INPLACE_DUNDERS or (short.endswith("_") and not short.endswith("__"))


def is_random_name(name: str) -> bool:
    """Ops whose result depends on a random generator (dropout, rand*, normal_, ...) and ``torch.nn.init``."""
    return name.startswith("torch.nn.init.") or bool(_RANDOM.fullmatch(_short(name)))


def draws_random(info: FunctionInfo, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a call of ``info`` with these arguments draws random numbers: a random op by name, or one
    whose dropout probability (:data:`RANDOM_WHEN`) is positive."""
    if info.random:
        return True
    if info.random_when is None:
        return False
    keyword, position = info.random_when
    value = kwargs.get(keyword, args[position] if len(args) > position else 0.0)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def is_collective_name(name: str) -> bool:
    """A call that talks to other ranks: ``torch.distributed.all_reduce`` & co. (:data:`COLLECTIVES`), and the
    operators of functional collectives and c10d (``_c10d_functional.all_reduce.default``)."""
    return name in _COLLECTIVE_NAMES or name.startswith(_COLLECTIVE_NAMESPACES)


def info_for_name(name: str, is_op: bool = True) -> FunctionInfo:
    """The :class:`FunctionInfo` of an op called ``name`` (its kind read from the name). A collective writes
    into its tensor arguments (``inplace``), except ``send``/``isend``, which only read them."""
    if name.startswith(_C10D):
        name = "torch.distributed." + name[len(_C10D):]
    if is_collective_name(name):
        writes = _short(name) not in ("send", "isend", "barrier", "monitored_barrier", "send_object_list")
        return FunctionInfo(name, is_op, writes, False, False, None, collective=True)
    return FunctionInfo(name, is_op, is_inplace_name(name), is_random_name(name), is_uninitialized_name(name),
                        RANDOM_WHEN.get(_short(name)))


def is_uninitialized_name(name: str) -> bool:
    """Factories whose results are uninitialized memory (``torch.empty``, ``Tensor.new_empty``, ...)."""
    return _short(name) in UNINITIALIZED


def _raw_name(func: Callable[..., Any]) -> str:
    name = resolve_name(func)
    if name:
        own = getattr(func, "__name__", None)
        if own and name != f"torch.{own}" and getattr(torch, own, None) is func:
            return f"torch.{own}"  # resolve_name answers torch.spmm for torch.mm: the function's own name wins
        return name
    owner = getattr(func, "__self__", None)
    short = getattr(func, "__name__", None) or repr(func)
    if owner is torch._C._VariableFunctions or owner is torch:
        return f"torch.{short}"
    if owner is torch._C._nn:
        return f"torch._C._nn.{short}"
    module = getattr(func, "__module__", None) or ""
    qualname = getattr(func, "__qualname__", short)
    if qualname.startswith("_VariableFunctionsClass."):
        return f"torch.{short}"
    return f"{module}.{qualname}" if module else qualname


_CACHE: dict[Any, FunctionInfo] = {}


def function_info(func: Callable[..., Any]) -> FunctionInfo:
    """Name and kind of ``func``, cached."""
    try:
        return _CACHE[func]
    except (KeyError, TypeError):
        pass
    name = _raw_name(func)
    short = _short(name)
    is_op = not (
        short in _NON_OPS
        or name in _NON_OP_FUNCTIONS
        or short in ("__get__", "__set__", "__delete__")
        or name.startswith(("torch._C.", "profiler.", "torch.autograd.profiler", "torch._ops."))
        or "._record_function" in name
        or short.startswith("_set_")
    )
    info = info_for_name(name, is_op)
    with contextlib.suppress(TypeError):  # unhashable callables are rare; they are classified every time
        _CACHE[func] = info
    return info


@functools.cache
def api_names() -> frozenset[str]:
    """The names the tools give to calls of PyTorch's API (every function ``torch.overrides`` knows, as the
    engine names it, and ``torch.distributed``'s collectives): what an op_tools list may match."""
    from torch.overrides import get_overridable_functions

    names = {_raw_name(func) for funcs in get_overridable_functions().values() for func in funcs}
    names.update(f"torch.distributed.{name}" for name in COLLECTIVES)
    return frozenset(name for name in names if name)


def is_api_name(name: str) -> bool:
    """Whether ``name`` is an importable dotted name of a callable (a function of another library that
    :func:`op_tools.apply_feature` patches, an operator of a newer torch): valid in a list though not in
    :func:`api_names`."""
    try:
        return callable(getattr(*locate(name)))
    except (LookupError, ValueError, TypeError):
        return False


def locate(name: str) -> tuple[Any, str]:
    """``(owner, attribute)`` of an importable dotted name (``pkg.mod.func``, ``pkg.mod.Class.method``): the
    longest importable module prefix, then attributes. :class:`LookupError` if there is none."""
    import importlib

    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:-1]:
                owner = getattr(owner, attr)
            getattr(owner, parts[-1])
        except AttributeError:
            break
        return owner, parts[-1]
    raise LookupError(f"cannot find the function {name!r}")


def _import_dotted(name: str) -> Callable[..., Any]:
    obj = getattr(*locate(name))
    if not callable(obj):
        raise LookupError(f"cannot find the function {name!r} ({type(obj).__name__} is not callable)")
    return obj


def resolve_function(name: str, allowed_modules: tuple[str, ...] | list[str] = ()) -> Callable[..., Any]:
    """The callable an op name refers to, for replay.

    Replay calls what a case names, so only operators are resolved: functions of PyTorch's API that the
    tools intercept under that very name (``torch.Tensor.add``, ``torch.nn.functional.linear``,
    ``torch._foreach_add_``; not ``torch.load`` or ``torch.hub.load``), and functions in
    ``allowed_modules`` (packages whose functions were captured with :func:`op_tools.apply_feature`).
    Anything else raises :class:`LookupError`.
    """
    if name.startswith("torch."):
        func = _import_dotted(name)
        info = function_info(func)
        if info.name != name or not info.is_op:
            raise LookupError(f"{name!r} is not an operator of PyTorch's API; replay only calls operators")
        return func
    if not any(name == m or name.startswith(m + ".") for m in allowed_modules):
        top = name.split(".", 1)[0]
        raise LookupError(f"{name!r} is outside torch; replay calls only torch operators unless the module is "
                          f"allowed (--allow_module {top})")
    return _import_dotted(name)
