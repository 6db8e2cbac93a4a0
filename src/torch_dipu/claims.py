"""Claims: the composite operators of the DIOPI table run on dipu as themselves.

PyTorch decomposes a CompositeImplicitAutograd operator (``linear``, ``silu_backward``, ``cross_entropy_loss``)
at the autograd key, before any device sees it, so a vendor's fused kernel for it would never run. For every
such overload that the DIOPI table lists, torch_dipu registers a kernel on ``AutogradPrivateUse1`` (as the
seeds' DIPU registers ``Linear`` in place of the composite ``linear``):

- no gradient needed (grad mode off, or no tensor argument requires grad; autograd calls backward functions
  such as ``silu_backward`` this way): the overload runs below autograd, so it reaches
  ``DipuTensor.__torch_dispatch__`` and the vendor's DIOPI kernel as itself;
- gradients needed: :class:`_Claimed`, an autograd function whose forward is that vendor call and whose
  backward is PyTorch's own decomposition's backward on the saved inputs, so gradients are the CPU's: traced once
  per call signature without the forward's work (torch_dipu.claim_backward), or by recomputing the decomposition
  and differentiating it (a signature's first call, ``create_graph=True``, where the recomputation stays on the
  graph so double backward works, and while a mode watches).

Tensors other than dipu tensors (fake tensors while ``torch.compile`` traces, functional tensors) and random
functions that need gradients keep PyTorch's decomposition. The table decides, never a list of operators here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

import diopi
from diopi import DiopiFunction
from diopi.registry import dispatcher_overloads, is_composite, qualified_name
from diopi.tensor_walk import call_tensors
from torch_dipu import claim_backward
from torch_dipu.op_schema import returns_view
from torch_dipu.tensor import DipuTensor

_KEY = "AutogradPrivateUse1"
_below_autograd = torch._C._AutoDispatchBelowAutograd
_Tensor = torch.Tensor

#: Qualified overload names (``aten::linear``, ``aten::max.other``) claimed by a live :class:`Claims`.
_CLAIMED: set[str] = set()


def unclaimable_reason(op: torch._ops.OpOverload) -> str | None:
    """Why a composite overload is not claimed (None: it can be): results that alias inputs must keep the
    views and writes PyTorch's decomposition gives them."""
    if op._schema.is_mutable:
        return "writes its arguments (in-place or out= overload)"
    if returns_view(op._schema):
        return "returns a view of an input"
    return None


def is_claimed(op: torch._ops.OpOverload) -> bool:
    """Whether torch_dipu claims ``op`` now (its AutogradPrivateUse1 kernel is a live claim)."""
    name = qualified_name(op)
    return name in _CLAIMED and torch._C._dispatch_has_kernel_for_dispatch_key(name, _KEY)


def _split(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], Callable[[Any], tuple[tuple, dict]], Any]:
    """The tensors of a call (top level and inside lists), a function rebuilding the call from others, and the
    call's non-tensor part (its structure and other values: what a traced backward depends on besides tensors)."""
    if not kwargs and not any(type(v) is list or type(v) is tuple for v in args):
        # positional arguments only, no lists (``linear``, ``cross_entropy_loss``): no pytree, whose tree spec's
        # hash would be most of a signature's
        flat, structure = args, len(args)

        def finish(values: list) -> tuple[tuple, dict]:
            return tuple(values), {}
    else:
        flat, structure = torch.utils._pytree.tree_flatten((args, kwargs))

        def finish(values: list) -> tuple[tuple, dict]:
            return torch.utils._pytree.tree_unflatten(values, structure)
    positions = tuple(i for i, v in enumerate(flat) if isinstance(v, _Tensor))

    def rebuild(tensors: Any) -> tuple[tuple, dict]:
        values = list(flat)
        for i, t in zip(positions, tensors, strict=True):
            values[i] = t
        return finish(values)

    statics = (structure, positions, tuple(v for i, v in enumerate(flat) if i not in positions))
    return [flat[i] for i in positions], rebuild, statics


def _differentiable(value: Any) -> bool:
    return isinstance(value, _Tensor) and (value.is_floating_point() or value.is_complex())


class _Claimed(torch.autograd.Function):
    """A claimed overload with gradients: forward on the vendor, backward through PyTorch's decomposition."""

    @staticmethod
    def forward(ctx: Any, op: torch._ops.OpOverload, rebuild: Callable, statics: Any, *tensors: Any) -> Any:
        args, kwargs = rebuild(tensors)
        with _below_autograd():
            out = op(*args, **kwargs)
        ctx.op, ctx.rebuild, ctx.statics = op, rebuild, statics
        ctx.save_for_backward(*tensors)
        outs = out if isinstance(out, tuple) else (out,)
        ctx.mark_non_differentiable(*(o for o in outs if isinstance(o, _Tensor) and not _differentiable(o)))
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        needs = ctx.needs_input_grad[3:]
        saved = ctx.saved_tensors
        # the decomposition's backward traced once for this signature (no recomputation), else recomputed
        found = claim_backward.run(ctx.op, ctx.rebuild, ctx.statics, needs, saved, grads)
        if found is None:
            found = claim_backward.recompute(ctx.op, ctx.rebuild, needs, saved, grads, torch.is_grad_enabled())
        got = iter(found)
        return (None, None, None, *(next(got) if n else None for n in needs))


_apply_claimed = torch._C._FunctionBase.__dict__["apply"].__get__(None, _Claimed)  # the C++ apply
_transforms_active = torch._C._are_functorch_transforms_active
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def _claim_kernel(op: torch._ops.OpOverload, fn: DiopiFunction) -> Callable[..., Any]:
    random = fn.is_random

    def claimed(*args: Any, **kwargs: Any) -> Any:
        tensors = call_tensors(args, kwargs)
        if not all(isinstance(t, DipuTensor) or type(t) is _Tensor for t in tensors):
            return op.decompose(*args, **kwargs)  # fake / functional tensors: PyTorch's own decomposition
        if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            with _below_autograd():
                return op(*args, **kwargs)
        if random:  # a recomputation would draw other numbers than the forward did
            return op.decompose(*args, **kwargs)
        flat, rebuild, statics = _split(args, kwargs)
        if _transforms_active():
            return _Claimed.apply(op, rebuild, statics, *flat)
        # Function.apply less its pytree pass over every argument (unwrap_dead_wrappers, for functorch): only a
        # tensor that is not a DipuTensor can be a functorch wrapper.
        return _apply_claimed(op, rebuild, statics, *(t if type(t) is DipuTensor else _unwrap_if_dead(t) for t in flat))

    return claimed


class Claims:
    """The overloads claimed by one :func:`claim_table` call; their kernels live until :meth:`release`."""

    def __init__(self) -> None:
        self.libraries: dict[str, torch.library.Library] = {}
        self.overloads: list[str] = []

    def claim(self, op: torch._ops.OpOverload, fn: DiopiFunction) -> None:
        namespace = op.namespace
        if namespace not in self.libraries:
            self.libraries[namespace] = torch.library.Library(namespace, "IMPL")
        name = qualified_name(op)
        self.libraries[namespace].impl(name.split("::", 1)[1], _claim_kernel(op, fn), _KEY)
        self.overloads.append(name)
        _CLAIMED.add(name)

    def release(self) -> None:
        """Remove these claims (tests do, after claiming functions they added to the table)."""
        for library in self.libraries.values():
            library._destroy()
        self.libraries.clear()
        _CLAIMED.difference_update(self.overloads)
        self.overloads.clear()


def claim_table() -> Claims:
    """Claim every composite overload of every table function not yet claimed (one with an AutogradPrivateUse1
    kernel of its own, such as ``scaled_dot_product_attention``, is left alone)."""
    claims = Claims()
    for fn in diopi.functions():
        for packet in fn.aten:
            for op in dispatcher_overloads(packet):
                name = qualified_name(op)
                if (is_composite(op) and unclaimable_reason(op) is None and name not in _CLAIMED
                        and not torch._C._dispatch_has_kernel_for_dispatch_key(name, _KEY)):
                    claims.claim(op, fn)
    return claims


_INSTALLED: list[Claims] = []


def install() -> None:
    """Claim the table at ``import torch_dipu`` (kept for the life of the process)."""
    _INSTALLED.append(claim_table())


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Let PyTorch decompose the claimed operators again inside the block (for code that depends on a composite's
    parts, such as tests of how tools see the several autograd nodes a decomposed ``F.linear`` creates)."""
    while _INSTALLED:
        _INSTALLED.pop().release()
    try:
        yield
    finally:
        install()


__all__ = ["Claims", "claim_table", "dispatcher_overloads", "install", "is_claimed", "is_composite", "suspended",
           "unclaimable_reason"]
