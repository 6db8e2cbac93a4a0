"""The backward of a claimed operator without recomputing its forward: its decomposition's backward, traced once.

A claimed operator (torch_dipu.claims) runs forward as one vendor kernel, so autograd has no graph of PyTorch's
decomposition to differentiate. Recomputing the decomposition in backward gives the CPU's gradients bit for bit
but repeats the forward's work (every ``linear``'s multiply runs twice). Instead, the first time a call signature
(operator, which inputs need gradients, the inputs' and gradients' shapes, strides, dtypes and devices, the
non-tensor arguments) comes back, ``torch.fx``'s ``make_fx`` traces "recompute the decomposition, then
``autograd.grad``" once on fake tensors of that signature, and dead-code elimination drops every forward operator the
backward does not read (``linear``'s multiply goes; ``cross_entropy`` keeps the ``log_softmax`` its backward needs).
Later backward passes of that signature run the traced graph: the same ATen operators, with the same arguments, in
the same order as autograd would run them, so the gradients stay the CPU's bit for bit.

The recomputing path stays where a trace would not be the same computation or could not be shared: double backward
(``create_graph``), a dispatch or function mode watching (op tools see the operators they saw before), the first
call of a signature (a one-off call pays no trace), a signature that fails to trace.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

_CIA_KEY = torch._C.DispatchKey.CompositeImplicitAutograd
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_mode_enabled = torch._C._is_torch_function_mode_enabled

#: traced backward graphs kept (least recently used first out)
CAPACITY = 512
_UNTRACEABLE = object()


class _Cache:
    """signature -> traced graph (or ``_UNTRACEABLE``); a signature seen once only is remembered as seen."""

    def __init__(self) -> None:
        self.graphs: OrderedDict[Any, Any] = OrderedDict()
        self.seen: OrderedDict[Any, None] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            found = self.graphs.get(key)
            if found is not None:
                self.graphs.move_to_end(key)
            return found

    def first_time(self, key: Any) -> bool:
        """Whether ``key`` is new (it is remembered as seen now)."""
        with self.lock:
            if key in self.seen:
                return False
            self.seen[key] = None
            if len(self.seen) > CAPACITY:
                self.seen.popitem(last=False)
            return True

    def put(self, key: Any, graph: Any) -> None:
        with self.lock:
            self.graphs[key] = graph
            if len(self.graphs) > CAPACITY:
                self.graphs.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.graphs.clear()
            self.seen.clear()


_CACHE = _Cache()


def clear() -> None:
    """Forget every traced graph (tests)."""
    _CACHE.clear()


def traced_graphs() -> int:
    """How many signatures have a traced backward graph."""
    return sum(1 for g in _CACHE.graphs.values() if g is not _UNTRACEABLE)


def _meta(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device)


def signature(op: torch._ops.OpOverload, statics: Any, needs: tuple[bool, ...], saved: tuple,
              grads: tuple) -> Any:
    """The key of a backward call: everything the traced graph depends on (None: not hashable, no trace)."""
    key = (op, statics, needs, tuple(_meta(t) for t in saved),
           tuple(None if g is None else _meta(g) for g in grads))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _fake_like(t: torch.Tensor) -> torch.Tensor:
    """A fake tensor (inside the active FakeTensorMode) with ``t``'s sizes, strides, offset, dtype and device."""
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    span = t.storage_offset() + 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return torch.empty(span, dtype=t.dtype, device=t.device).as_strided(t.shape, t.stride(), t.storage_offset())


def recompute(op: torch._ops.OpOverload, rebuild: Callable, needs: tuple[bool, ...], saved: tuple, grads: tuple,
              create_graph: bool) -> tuple:
    """The gradients of the inputs that need them (in input order), by recomputing ``op``'s decomposition on the
    saved inputs and differentiating it: the recomputing backward, and what a trace records."""
    # With create_graph the saved inputs keep their history, so the gradients are differentiable; one alias per
    # argument either way, so a tensor passed twice (``F.linear(x, x)``) gets each position's gradient once.
    if create_graph:
        inputs = [t.view_as(t) if n else t for t, n in zip(saved, needs, strict=True)]
    else:
        inputs = [t.detach().requires_grad_(n) for t, n in zip(saved, needs, strict=True)]
    # The vendor ran the operator as one kernel on the inputs it was given: autocast acts at its boundary only.
    with torch.enable_grad(), _autocast_off():
        args, kwargs = rebuild(inputs)
        # The C++ kernel the CPU runs; ``op.decompose`` would prefer torch._decomp's Python rewrite where one exists
        # (``upsample_bilinear2d.vec``), whose gradients differ from the CPU's in the last bits.
        out = op._op_dk(_CIA_KEY, *args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    pairs = [(o, g) for o, g in zip(outs, grads, strict=True)
             if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
    wanted = [x for x, n in zip(inputs, needs, strict=True) if n]
    if not pairs:
        return tuple(None for _ in wanted)
    return tuple(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True,
                                     create_graph=create_graph))


def _backward_function(op: torch._ops.OpOverload, rebuild: Callable, needs: tuple[bool, ...],
                       present: tuple[bool, ...]) -> Callable:
    """:func:`recompute` as ``(saved inputs..., present grads...) -> gradients``, the form ``make_fx`` traces."""
    count = len(needs)

    def backward(*tensors: torch.Tensor) -> tuple:
        given = iter(tensors[count:])
        grads = tuple(next(given) if p else None for p in present)
        return recompute(op, rebuild, needs, tensors[:count], grads, False)

    return backward


def _trace(op: torch._ops.OpOverload, rebuild: Callable, needs: tuple[bool, ...], saved: tuple,
           grads: tuple) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    present = tuple(g is not None for g in grads)
    with FakeTensorMode():
        fakes = [_fake_like(t) for t in (*saved, *(g for g in grads if g is not None))]
    graph = make_fx(_backward_function(op, rebuild, needs, present), tracing_mode="real")(*fakes)
    for node in list(graph.graph.nodes):  # detach only cut the recomputation from the caller's graph: identities here
        if node.op == "call_function" and node.target is _DETACH:
            node.replace_all_uses_with(node.args[0])
            graph.graph.erase_node(node)
    graph.graph.eliminate_dead_code()
    if any(node.op == "get_attr" for node in graph.graph.nodes):  # a constant made while tracing is a fake tensor
        return _UNTRACEABLE
    graph.recompile()
    return graph


_DETACH = torch.ops.aten.detach.default
_autocast_enabled = torch.is_autocast_enabled
_NO_CONTEXT = contextlib.nullcontext()


def _autocast_off() -> contextlib.AbstractContextManager:
    """The device's autocast switched off for a block (no context to build when it is off already)."""
    return torch.autocast("dipu", enabled=False) if _autocast_enabled("dipu") else _NO_CONTEXT


def run(op: torch._ops.OpOverload, rebuild: Callable, statics: Any, needs: tuple[bool, ...], saved: tuple,
        grads: tuple) -> tuple | None:
    """The gradients of the inputs that need them (in input order) from the signature's traced graph, or None when
    the caller must recompute (see the module docstring)."""
    if torch.is_grad_enabled() or _dispatch_modes() or _function_mode_enabled():
        return None
    key = signature(op, statics, needs, saved, grads)
    if key is None:
        return None
    graph = _CACHE.get(key)
    if graph is None:
        if _CACHE.first_time(key):
            return None
        try:
            graph = _trace(op, rebuild, needs, saved, grads)
        except Exception:  # noqa: BLE001 - an operator the tracer cannot follow: the recomputing path serves it
            graph = _UNTRACEABLE
        _CACHE.put(key, graph)
    if graph is _UNTRACEABLE:
        return None
    try:
        with _autocast_off():  # the traced operators as traced (autocast would recast them)
            # forward itself: the graph is ours, with no module hooks for nn.Module.__call__ to look for
            return tuple(graph.forward(*saved, *(g for g in grads if g is not None)))
    except Exception:  # noqa: BLE001 - the graph's operators are pure: the recomputing path can still serve the call
        _CACHE.put(key, _UNTRACEABLE)
        return None
