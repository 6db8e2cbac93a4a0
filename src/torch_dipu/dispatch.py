"""ATen -> DIOPI dispatch: the per-operator handlers behind ``DipuTensor.__torch_dispatch__``.

A handler is built once per ATen overload and cached. It unwraps dipu tensors to storage tensors,
runs the selected kernel (see :mod:`torch_dipu.kernels`) and wraps the results. In-place and ``out=``
overloads return the caller's tensors; view overloads return new dipu tensors aliasing the input's
storage. This is the product's hot loop: keep per-call work minimal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import diopi
from torch_dipu import device_kernels, dicl, factories, host_sync, kernels, storage
from torch_dipu.state import get_state
from torch_dipu.tensor import (
    DipuTensor,
    forget_handlers,
    from_storage,
    set_handler,
    set_handler_builder,
    use_compiled_dispatch,
)

try:  # the compiled fast path (setup.py builds it where a C compiler is found; the Python path is complete)
    from torch_dipu import _fastpath
except ImportError:
    _fastpath = None
try:  # the allocator's common request in C (torch_dipu.allocator.CachingAllocator.use_compiled)
    from torch_dipu import _fastalloc
except ImportError:
    _fastalloc = None

Handler = Callable[[tuple, dict | None], Any]
_CPU = torch.device("cpu")
_Tensor = torch.Tensor
_profiling = torch._C._autograd._profiler_enabled  # one C flag read per kernel, only for ranged kernels
_record_function = torch.profiler.record_function
_increment_version = torch.autograd.graph.increment_version


#: ``wrapper(handler, func, plan) -> handler``: may wrap the handler of ATen overload ``func`` when it is built
#: (returning ``handler`` itself leaves it alone).
HandlerWrapper = Callable[[Handler, torch._ops.OpOverload, kernels.KernelPlan], Handler]

#: The run-time switches that wrap handlers, innermost first: the call counter (torch_dipu.call_counter), the
#: device-level auto-compare (torch_dipu.device_autocompare), argument dumps (torch_dipu.dump_args).
WRAPPER_ORDER = ("count", "autocompare", "dump")

#: The wrappers switched on, by name in :data:`WRAPPER_ORDER`. Empty by default, so a plain run pays nothing;
#: change it with :func:`set_handler_wrapper`, which rebuilds the handlers.
handler_wrappers: dict[str, HandlerWrapper] = {}


def set_handler_wrapper(name: str, wrapper: HandlerWrapper | None) -> None:
    """Switch wrapper ``name`` (one of :data:`WRAPPER_ORDER`) on, or off with None; handlers are rebuilt on
    their next call."""
    if name not in WRAPPER_ORDER:
        raise ValueError(f"unknown handler wrapper {name!r} (expected one of {', '.join(WRAPPER_ORDER)})")
    if wrapper is None:
        handler_wrappers.pop(name, None)
    else:
        handler_wrappers[name] = wrapper
    clear_handlers()


_use_fast_path = False


def set_fast_path(enabled: bool) -> bool:
    """Run the common call of each operator through the compiled fast path (``DIPU_FAST_PATH``, on at import), or
    every call through the Python path; handlers are rebuilt. The device's allocator (``state.memory``) follows.
    Answers whether the fast path is in use (never where ``torch_dipu._fastpath`` was not built)."""
    global _use_fast_path
    _use_fast_path = enabled and _fastpath is not None
    use_compiled_dispatch(_fastpath if _use_fast_path else None)
    get_state().memory.use_compiled(_fastalloc if enabled else None)
    clear_handlers()
    return _use_fast_path


def fast_path_in_use() -> bool:
    """Whether operators run through the compiled fast path (:func:`set_fast_path`)."""
    return _use_fast_path


def plain_handler(handler: Handler) -> Handler:
    """The Python handler behind ``handler`` (a compiled fast-path handler defers to it; others are their own)."""
    return getattr(handler, "slow", handler)


def clear_handlers() -> None:
    """Forget every built handler (after the fallback list or vendor switches change)."""
    forget_handlers()


def _unwrap_list(items: list | tuple) -> list:
    return [x._raw if type(x) is DipuTensor else x for x in items]


def _first_device(args: tuple) -> torch.device | None:
    for x in args:
        if type(x) is DipuTensor:
            return x.device
        if (type(x) is list or type(x) is tuple) and x:
            for y in x:
                if type(y) is DipuTensor:
                    return y.device
    return None


def _write_aliases(schema: torch._C.FunctionSchema) -> list[int | str] | None:
    """For each return that aliases a written argument, that argument's position or keyword name."""
    if not schema.returns:
        return None
    sources: list[int | str] = []
    for ret in schema.returns:
        info = ret.alias_info
        if info is None or not info.is_write:
            return None
        for pos, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write and arg.alias_info.before_set & info.before_set:
                sources.append(arg.name if arg.kwarg_only else pos)
                break
        else:
            return None
    return sources


# In-place operators that change a tensor's sizes, strides or offset rather than its values.
_METADATA_INPLACE = frozenset(
    {"resize_", "resize_as_", "set_", "as_strided_", "squeeze_", "unsqueeze_", "transpose_", "t_",
     "swapdims_", "swapaxes_", "_resize_output_"}
)


def _refresh_metadata(wrapper: DipuTensor) -> None:
    """Make a wrapper's sizes/strides/offset follow its storage tensor after a resizing write."""
    raw = wrapper._raw
    if (
        wrapper.shape != raw.shape
        or wrapper.stride() != raw.stride()
        or wrapper.storage_offset() != raw.storage_offset()
    ):
        get_state().memory.resized(raw, wrapper.device.index)
        wrapper.data = DipuTensor(raw, wrapper.device)


# Operators that take host tensors beside device tensors on CUDA too (copies, host index tensors).
_ACCEPTS_HOST_TENSORS = frozenset(
    {"copy_", "copy", "_copy_from", "_copy_from_and_resize", "index", "index_put", "index_put_",
     "_index_put_impl_", "_unsafe_index", "_unsafe_index_put", "tensor_split", "set_",
     "_has_compatible_shallow_copy_type", "is_same_size", "is_set_to"}
)


# Arguments that may be host tensors where CUDA's kernels accept (or require) them on the CPU: sequence
# lengths and batch sizes, which the kernels read on the host. Every other argument of these operators
# follows the usual rule.
_HOST_ARGUMENTS = {
    "_ctc_loss": ("input_lengths", "target_lengths"),
    "_ctc_loss_backward": ("input_lengths", "target_lengths"),
    "_pack_padded_sequence": ("lengths",),
    "_pack_padded_sequence_backward": ("batch_sizes",),
    "_pad_packed_sequence": ("batch_sizes",),
}


# Results that stay on the host, as CUDA's kernels return them: a packed sequence's batch sizes and lengths.
_HOST_OUTPUTS = {"_pack_padded_sequence": (1,), "_pad_packed_sequence": (1,)}


def _reject_mixed_devices(func: torch._ops.OpOverload, values: Any, device: torch.device | None,
                          check_host: bool) -> None:
    """Raise, as CUDA does, when a dipu tensor on another device, or (``check_host``) a host tensor
    that is not a 0-dim scalar, meets the dipu tensors of ``device`` in one operator."""
    for value in values:
        t = type(value)
        if t is list or t is tuple:
            _reject_mixed_devices(func, value, device, check_host)
            continue
        if device is None or not (
            (t is DipuTensor and value.device != device) or (check_host and t is _Tensor and value.dim() != 0)
        ):
            continue
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {device} and "
            f"{value.device}! (aten.{kernels.op_names(func)[0]}: move the {value.device} tensor to {device})"
        )


def _has_tensor_list(schema: torch._C.FunctionSchema) -> bool:
    return any(str(a.type).startswith(("List[Tensor", "List[Optional[Tensor")) for a in schema.arguments)


def _make_view(raw: torch.Tensor, device: torch.device) -> DipuTensor:
    """Wrap a view; it keeps the storage tensor's conjugate and negative bits (``_conj``, ``_neg_view``)."""
    wrapper = from_storage(raw, device)
    if raw.is_conj():
        torch._C._set_conj(wrapper, True)
    if raw.is_neg():
        torch._C._set_neg(wrapper, True)
    return wrapper


def range_name(func: torch._ops.OpOverload, plan: kernels.KernelPlan) -> str | None:
    """The name of the kernel's range in a ``torch.profiler`` trace: the DIOPI function a vendor kernel
    implements (``diopiMm``), ``fallback::aten.<op>`` for a CPU fallback, None for torch_dipu's own views
    and allocations (they show as their ``aten::`` ops only)."""
    if plan.kind == "vendor" and plan.function is not None:
        return plan.function.name
    if plan.kind == "fallback":
        return f"fallback::aten.{kernels.op_names(func)[0]}"
    return None


def _run_recorded(name: str, run: Any, kernel: Any, func: Any, uargs: list, ukwargs: dict | None) -> Any:
    """Run the kernel inside a profiler range named ``name`` (only while the profiler records)."""
    with _record_function(name):
        if ukwargs:
            return run(*uargs, **ukwargs) if run is not None else kernel(func, *uargs, **ukwargs)
        return run(*uargs) if run is not None else kernel(func, *uargs)


def build_handler(func: torch._ops.OpOverload) -> Handler:
    """Build, cache and return the handler for overload ``func`` (an ATen operator, a collective, or another
    library's operator with a PrivateUse1 kernel: :mod:`torch_dipu.device_kernels`)."""
    if func.namespace == "c10d":  # collectives run on the group's transport (torch_dipu.dicl)
        handler = dicl.build_handler(func)
        set_handler(func, handler)
        return handler
    if device_kernels.has_device_kernel(func):  # another library's kernel for the device: run it as a backend would
        handler = device_kernels.build_handler(func)
        set_handler(func, handler)
        return handler
    state = get_state()
    schema = func._schema
    plan = kernels.select(func, state)
    packet = diopi.aten_packet_name(func)
    # The reference, fallback and native kernels are the ATen overload itself: call it directly.
    direct = func._op if plan.direct else None
    kernel = plan.kernel
    track = state.memory.track
    write_sources = _write_aliases(schema)
    may_resize = write_sources is not None and (
        any(isinstance(w, str) for w in write_sources) or packet in _METADATA_INPLACE
    )
    single_return = len(schema.returns) == 1
    is_view = kernels.returns_view(schema)
    has_lists = _has_tensor_list(schema)
    has_device_kwarg = any(a.name == "device" and a.kwarg_only for a in schema.arguments)
    has_generator = any(a.name == "generator" for a in schema.arguments)
    generator_position = next(
        (i for i, a in enumerate(schema.arguments) if a.name == "generator" and not a.kwarg_only), None
    )
    # torch_dipu's own allocations (empty_like, new_empty, ...) check the requested dtype themselves.
    check_dtype = (
        factories.check_dtype
        if plan.kind == "native" and any(a.name == "dtype" for a in schema.arguments)
        else None
    )
    generators = state.generators
    make = _make_view if is_view else from_storage
    check_host = packet not in _ACCEPTS_HOST_TENSORS
    host_names = _HOST_ARGUMENTS.get(packet, ())
    host_positions = frozenset(i for i, a in enumerate(schema.arguments) if a.name in host_names)
    host_outputs = _HOST_OUTPUTS.get(packet, ())
    ranged = range_name(func, plan)
    copies_to_host = packet == "_to_copy"  # a copy to a host device synchronises (torch_dipu.host_sync)

    def wrap(out: Any, device: torch.device) -> Any:
        if type(out) is _Tensor:
            if not is_view:
                track(out, device.index)
            return make(out, device)
        if type(out) is tuple or type(out) is list:
            if host_outputs:
                return type(out)(o if i in host_outputs else wrap(o, device) for i, o in enumerate(out))
            return type(out)(wrap(o, device) for o in out)
        return out

    def handler(args: tuple, kwargs: dict | None) -> Any:
        if has_lists:
            device = _first_device(args)
            uargs = [
                x._raw if type(x) is DipuTensor else (_unwrap_list(x) if type(x) is list or type(x) is tuple else x)
                for x in args
            ]
            if check_host or state.several_devices:
                _reject_mixed_devices(func, args, device, check_host)
        else:
            first = args[0] if args else None
            device = first.device if type(first) is DipuTensor else _first_device(args)
            uargs = [x._raw if type(x) is DipuTensor else x for x in args]
            if (check_host and _Tensor in map(type, args)) or state.several_devices:
                checked = [a for i, a in enumerate(args) if i not in host_positions] if host_names else args
                _reject_mixed_devices(func, checked, device, check_host)
        run = direct
        if kwargs:
            if device is None:
                device = _first_device(tuple(kwargs.values()))
            ukwargs = {}
            for k, v in kwargs.items():
                t = type(v)
                if t is DipuTensor:
                    v = v._raw
                elif t is list or t is tuple:
                    v = _unwrap_list(v)
                ukwargs[k] = v
            if check_host or state.several_devices:
                checked = [v for k, v in kwargs.items() if k not in host_names] if host_names else kwargs.values()
                _reject_mixed_devices(func, checked, device, check_host)
            if check_dtype and ukwargs.get("dtype") is not None:
                check_dtype(ukwargs["dtype"])
            if has_device_kwarg:
                requested = ukwargs.get("device")
                if requested is not None:
                    requested = torch.device(requested)
                    if requested.type == "dipu":
                        device = state.device(state.device_index(requested))
                        ukwargs["device"] = _CPU
                    else:
                        device = None  # a copy to the host: a transfer, not a device kernel
                        run = func._op
                        if copies_to_host and type(args[0]) is DipuTensor:
                            host_sync.copied_to_host(args[0], ukwargs)
        else:
            ukwargs = None
        if has_generator and device is not None:
            generator = generators[device.index]
            if generator_position is not None and len(uargs) > generator_position:
                if uargs[generator_position] is None:
                    uargs[generator_position] = generator
            elif ukwargs is None:
                ukwargs = {"generator": generator}
            elif ukwargs.get("generator") is None:
                ukwargs["generator"] = generator
        if ranged is not None and _profiling():
            out = _run_recorded(ranged, run, kernel, func, uargs, ukwargs)
        elif ukwargs:
            out = run(*uargs, **ukwargs) if run is not None else kernel(func, *uargs, **ukwargs)
        else:
            out = run(*uargs) if run is not None else kernel(func, *uargs)
        if write_sources is not None:
            if may_resize:
                for s in write_sources:
                    w = args[s] if type(s) is int else kwargs[s]
                    for t in w if type(w) is list or type(w) is tuple else (w,):
                        if type(t) is DipuTensor:
                            _refresh_metadata(t)
            if single_return:
                s = write_sources[0]
                return args[s] if type(s) is int else kwargs[s]
            return tuple(args[s] if type(s) is int else kwargs[s] for s in write_sources)
        if device is None:
            return out
        if type(out) is _Tensor:
            if not is_view:
                track(out, device.index)
            return make(out, device)
        return wrap(out, device)

    takes_storage = storage.has_storage_argument(schema)
    if takes_storage:
        # ``set_(storage)`` with a dipu storage (Tensor.untyped_storage() of a dipu tensor): the vendor's storage.
        on_device_storages = handler

        def handler(args: tuple, kwargs: dict | None) -> Any:
            args = tuple(storage.host_storage(a) for a in args)
            if kwargs:
                kwargs = {k: storage.host_storage(v) for k, v in kwargs.items()}
            return on_device_storages(args, kwargs)

    written_lists = tuple(
        (pos, a.name) for pos, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and str(a.type).startswith("List[Tensor")
    )
    if written_lists:
        # Autograd bumps the version of a tensor an in-place op writes, but not of the tensors in a written list
        # (``_foreach_add_``): device kernels do that themselves (CUDA's foreach kernels call increment_version),
        # or a tensor saved for backward and then changed in place would give a wrong gradient with no error.
        write_lists = handler

        def handler(args: tuple, kwargs: dict | None) -> Any:
            out = write_lists(args, kwargs)
            for pos, name in written_lists:
                tensors = args[pos] if pos < len(args) else (kwargs or {}).get(name)
                if tensors:
                    _increment_version([t for t in tensors if type(t) is DipuTensor])
            return out

    if plan.needs_device_rng and not has_generator:
        # The kernel draws from the host's default generator: give it the tensor's device generator.
        draw_on_host_rng = handler

        def handler(args: tuple, kwargs: dict | None) -> Any:
            device = _first_device(args) or state.device()
            with kernels.host_rng_from(generators[device.index]):
                return draw_on_host_rng(args, kwargs)

    if (
        _use_fast_path and direct is not None and write_sources is None
        and not (has_lists or has_generator or written_lists or plan.needs_device_rng or takes_storage)
    ):
        handler = _fastpath.FastHandler(
            direct, handler, track, wrap, state, _profiling if ranged else None, is_view, check_host
        )

    # Count host synchronisations: None (nothing added) unless the overload may synchronise the host.
    counted = host_sync.handler_wrapper(func, packet, plan.kind == "fallback")
    if counted is not None:
        handler = counted(handler)

    if handler_wrappers:
        for name in WRAPPER_ORDER:
            wrapper = handler_wrappers.get(name)
            if wrapper is not None:
                handler = wrapper(handler, func, plan)
    set_handler(func, handler)
    return handler


set_handler_builder(build_handler)
if _fastpath is not None:
    _fastpath.setup(DipuTensor, torch.Tensor, torch.Tensor._make_wrapper_subclass, torch.strided, _make_view)
