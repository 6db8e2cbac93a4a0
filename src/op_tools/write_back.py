"""Run a call on other tensors (CPU copies, cast copies, ...) and write back what it wrote.

The tools that run a call on substitutes of its tensors (:class:`~op_tools.fallback.OpFallback`,
:class:`~op_tools.dtype_cast.OpDtypeCast`) share one skeleton, :class:`Substitution`::

    sub = Substitution()
    cargs, ckwargs = sub.swap(args, kwargs, make_copy)    # copies, and the map copy -> original
    out = sub.run(func, cargs, ckwargs, quiet=...)        # which copies the call wrote
    if sub.makes_view(out):                               # a view of a copy: the original call is wanted
        return func(*args, **kwargs)
    sub.write_back()                                      # written copies -> their originals
    return sub.restore(out, convert)                      # a returned copy -> its original, others converted

A copy is "written" when its version counter moved during the call, or, with ``quiet=True`` (the calls of
:data:`~op_tools.naming.QUIET_WRITERS`, like ``batch_norm``'s running statistics), when its values changed.
Writing back is ``original.copy_(copy)`` on the original tensor object, so when the original is a view the
write lands in its base, as the call on the original would have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from diopi.tensor_walk import map_leaves, tensors_in

__all__ = ["Substitution", "cpu_copy", "makes_view"]


def makes_view(out: Any, origin: dict[int, torch.Tensor], cpu_copies: list[torch.Tensor] = ()) -> bool:
    """Whether an output of a call on copies (``origin`` maps their ids) is a view of a copy, or shares
    storage with one of ``cpu_copies``: the call made a view (or an alias, like ``detach``)."""
    storages = {p for t in cpu_copies if (p := t.untyped_storage().data_ptr()) != 0}
    for t in tensors_in(out, unique=True):
        if id(t) in origin:
            continue
        if t._base is not None and id(t._base) in origin:
            return True
        if storages and t.device.type == "cpu" and t.untyped_storage().data_ptr() in storages:
            return True
    return False


def cpu_copy(t: torch.Tensor) -> torch.Tensor:
    """A differentiable CPU copy of ``t`` with its strides (a view's copy is as non-contiguous as the view,
    so ``contiguous()`` and friends decide as on the device); tensors with overlapping elements (``expand``)
    are copied contiguously."""
    if torch._debug_has_internal_overlap(t) != 1:  # 0: no overlap, 2: cannot tell (a non-dense view)
        try:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu").copy_(t)
        except RuntimeError:  # the strides do overlap
            pass
    return t.to("cpu")


class Substitution:
    """One call run on copies of some of its tensors.

    Attributes: :attr:`origin` (``id(copy) -> original``, every copy ever made, re-copies included),
    :attr:`copies` (``id(original) -> its first copy``, in the order made), :attr:`used` (the copies
    passed to the last :meth:`run`, in encoding order) and :attr:`written` (those it wrote). The copies are
    held for the substitution's life, so their ids stay unique.
    """

    def __init__(self) -> None:
        self.origin: dict[int, torch.Tensor] = {}
        self.copies: dict[int, torch.Tensor] = {}
        self.used: list[torch.Tensor] = []
        self.written: list[torch.Tensor] = []
        self._held: list[torch.Tensor] = []

    def substitute(self, value: torch.Tensor, make_copy: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The copy of the original ``value`` (made by ``make_copy`` the first time ``value`` is seen)."""
        copy = self.copies.get(id(value))
        if copy is None:
            copy = self.copies[id(value)] = make_copy(value)
            self.origin[id(copy)] = value
            self._held.append(copy)
        return copy

    def swap(self, args: tuple, kwargs: dict,
             make_copy: Callable[[torch.Tensor], torch.Tensor | None]) -> tuple[tuple, dict]:
        """``args``/``kwargs`` with each tensor for which ``make_copy`` gives a tensor swapped for it (None:
        the tensor stays). A tensor seen twice gets one copy."""
        def swap_one(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if id(value) in self.copies:
                return self.copies[id(value)]
            copy = make_copy(value)
            if copy is None:
                return value
            return self.substitute(value, lambda _: copy)

        return map_leaves(args, swap_one), map_leaves(kwargs, swap_one)

    def recopy(self, args: tuple, kwargs: dict,
               make_copy: Callable[[torch.Tensor], torch.Tensor | None]) -> tuple[tuple, dict]:
        """``args``/``kwargs`` (already swapped) with copies swapped again where ``make_copy(copy)`` gives a
        tensor (a float32 retry): the new copies stand for the same originals."""
        made: dict[int, torch.Tensor | None] = {}

        def recopy_one(value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or id(value) not in self.origin:
                return value
            if id(value) not in made:
                new = made[id(value)] = make_copy(value)
                if new is not None:
                    self.origin[id(new)] = self.origin[id(value)]
                    self._held.append(new)
            return made[id(value)] if made[id(value)] is not None else value

        return map_leaves(args, recopy_one), map_leaves(kwargs, recopy_one)

    def run(self, func: Callable[..., Any], args: tuple, kwargs: dict, *, quiet: bool = False) -> Any:
        """``func(*args, **kwargs)`` on the swapped arguments, finding the copies it wrote: their version
        counter moved or, with ``quiet``, their values changed (copies requiring grad are never compared)."""
        used = [t for t in tensors_in((args, kwargs), unique=True) if id(t) in self.origin]
        versions = [t._version for t in used]
        before = {id(t): t.clone() for t in used if not t.requires_grad} if quiet else {}
        self.used, self.written = used, []
        out = func(*args, **kwargs)
        self.written = [t for t, v in zip(used, versions, strict=True)
                        if t._version != v or (id(t) in before and not torch.equal(t, before[id(t)]))]
        return out

    def resized(self) -> bool:
        """Whether the call changed the shape of a copy it wrote (the original cannot take it back)."""
        return any(t.shape != self.origin[id(t)].shape for t in self.written)

    def makes_view(self, out: Any, *, shared_storage: bool = False) -> bool:
        """Whether ``out`` holds a view of a copy (or, with ``shared_storage``, a CPU tensor sharing storage
        with a copy used by the last :meth:`run`): the call made a view, the original call is wanted."""
        return makes_view(out, self.origin, self.used if shared_storage else ())

    def write_back(self) -> None:
        """Copy each written copy into its original (``original.copy_(copy)``: a view's base sees it)."""
        for copy in self.written:
            self.origin[id(copy)].copy_(copy)

    def restore(self, out: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        """``out`` with each returned copy mapped to its original (an in-place call returns the original
        object) and every other tensor through ``convert`` (moved or cast back)."""
        def back(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if id(value) in self.origin:
                return self.origin[id(value)]
            return convert(value)

        return map_leaves(out, back)
