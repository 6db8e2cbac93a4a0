"""torch_dipu: ``import torch_dipu`` adds the ``dipu`` device to PyTorch.

The device is PyTorch's PrivateUse1 backend, written in Python. Operators run the active vendor's
DIOPI kernels (``DIPU_DEVICE``, default ``droplet``) or fall back to the CPU. See docs/torch_dipu.md.
"""

from __future__ import annotations

import torch

from torch_dipu import device_autocompare, device_module, dicl, dispatch, dump_args, kernels, mem_check
from torch_dipu.allocator import CachingAllocator
from torch_dipu.call_counter import count_function_calls
from torch_dipu.config import DipuConfig
from torch_dipu.device_autocompare import set_autocompare_ops
from torch_dipu.dump_args import set_dump_op_args
from torch_dipu.generators import DipuGenerator
from torch_dipu.reachable import reachability
from torch_dipu.registration import DEVICE_NAME, register_device
from torch_dipu.runtime import DeviceRuntime, UnsupportedDtypeError
from torch_dipu.state import DipuState, get_state, set_state
from torch_dipu.tensor import DipuTensor
from torch_dipu.vendors import load_vendor

__all__ = [
    "DEVICE_NAME", "DeviceRuntime", "DipuGenerator", "DipuTensor", "UnsupportedDtypeError", "backward_errors",
    "count_function_calls", "fallback_ops", "reachability", "runtime", "set_autocompare_ops", "set_dump_op_args",
    "set_force_fallback",
]
__version__ = "0.1.0"


def _init() -> None:
    from torch_dipu.registration import privateuse1_refusal

    refusal = privateuse1_refusal()  # before anything is set up: a refused import leaves no half-made device
    if refusal is not None:
        raise ImportError(refusal)
    config = DipuConfig.from_env()
    rt = load_vendor(config.vendor)
    if config.compile_backend:
        from torch_dipu.compile_default import check_backend

        check_backend(config.compile_backend)
    state = DipuState(
        runtime=rt,
        config=config,
        memory=CachingAllocator(rt, config.memcaching_algorithm),
        generators=[],
        force_fallback_patterns=kernels.parse_fallback_list(config.force_fallback),
    )
    state.sync_devices()  # DIPU_VISIBLE_DEVICES naming a device the vendor lacks raises here
    set_state(state)
    register_device()
    dispatch.set_fast_path(config.fast_path)
    _sync_devices()
    rt.on_config_change(_sync_devices)
    rt.on_config_change(dispatch.clear_handlers)
    mem_check.install(state)
    device_autocompare.install(state)
    dump_args.install(state)
    dicl.register()


def _sync_devices() -> None:
    """Fit the per-device tables (index map, memory, default generators) to the vendor's devices; runs at
    import and after every change of the vendor's switches (droplet's ``device_count`` among them)."""
    state = get_state()
    state.sync_devices()
    count, generators = state.device_count(), state.generators
    del generators[count:]  # in place: dispatch handlers hold this list
    generators.extend(DipuGenerator(i).manual_seed(torch.initial_seed()) for i in range(len(generators), count))
    device_module.default_generators = tuple(generators)


def runtime() -> DeviceRuntime:
    """The active vendor runtime."""
    return get_state().runtime


def set_force_fallback(entries: list[str] | str) -> None:
    """Replace the force-fallback list (same syntax as ``DIPU_FORCE_FALLBACK_OPS_LIST``)."""
    from torch_dipu.config import split_list

    state = get_state()
    items = split_list(entries) if isinstance(entries, str) else [e.strip() for e in entries if e.strip()]
    state.force_fallback_patterns = kernels.parse_fallback_list(items)
    state.config.force_fallback = items
    dispatch.clear_handlers()


def backward_errors() -> list[BaseException]:
    """Operator errors raised inside backward passes so far (``backward()`` itself raises a RuntimeError
    naming the operator and the error)."""
    from torch_dipu.tensor import _BACKWARD_ERRORS

    return list(_BACKWARD_ERRORS)


def fallback_ops() -> set[str]:
    """ATen overloads that have run on the CPU fallback in this process so far."""
    return set(get_state().fallback_ops)


_init()
