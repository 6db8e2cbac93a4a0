"""The one walker over nested arguments (:mod:`diopi.tensor_walk`): order, containers, rebuilding."""

from __future__ import annotations

import collections
import dataclasses

import torch

from diopi.tensor_walk import MAX_DEPTH, call_tensors, leaves, map_leaves, tensors_in

Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Holder:
    x: torch.Tensor
    n: int = 3


def test_order_containers_and_unique() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    value = ([a, (b, 1)], {"k": c, "s": slice(d, None)}, Holder(a), torch.Size([2]), "text")
    assert [int(t) for t in tensors_in(value)] == [0, 1, 2, 3, 0]
    assert [int(t) for t in tensors_in(value, unique=True)] == [0, 1, 2, 3]
    assert leaves(value)[-2:] == [torch.Size([2]), "text"] and 3 in leaves(value)
    assert call_tensors((a, b, a), {"out": c}) == [a, b, c]  # the flat fast path, each object once
    assert [int(t) for t in call_tensors((a, [b, a]), {})] == [0, 1]  # a container: the general walk
    deep: object = a
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    assert tensors_in(deep) == []  # deeper than MAX_DEPTH is a leaf, not walked


def test_map_rebuilds_only_what_changed_and_keeps_types() -> None:
    a = torch.ones(2)
    out = torch.max(torch.tensor([[1.0, 3.0]]), dim=1)  # torch.return_types.max
    value = (Pair(a, 1), [a], {"x": a}, collections.OrderedDict(y=a), Holder(a), out, slice(None, 2), "s")
    mapped = map_leaves(value, lambda v: v * 2 if isinstance(v, torch.Tensor) else v)
    assert type(mapped[0]) is Pair and mapped[0].b == 1 and torch.equal(mapped[0].a, a * 2)
    assert type(mapped[3]) is collections.OrderedDict and type(mapped[4]) is Holder and mapped[4].n == 3
    assert type(mapped[5]) is type(out) and torch.equal(mapped[5].values, out.values * 2)
    assert mapped[6] is value[6] and mapped[7] == "s" and value[4].x is a  # unchanged parts kept, input untouched
    same = map_leaves(value, lambda v: v)
    assert same is value
