"""Graph passes: run a list of :data:`~dicp.dynamo_bridge.vendor.GraphPass` with counts, and generic passes a
vendor may put in its ``rewrite_passes`` (:func:`draws_apart`) or ``layout_passes`` (:func:`fold_transposes`).

A pass rewrites a ``torch.fx.GraphModule`` in place and returns how many rewrites it made; :func:`run_passes`
removes dead code and recompiles the module after any pass that changed something.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch

from .partition import call_arguments
from .vendor import GraphPass

__all__ = ["draws_apart", "fold_transposes", "pass_name", "run_passes"]

aten = torch.ops.aten


def pass_name(graph_pass: GraphPass) -> str:
    """The name a pass is reported under (its ``__name__``, else its class name)."""
    return getattr(graph_pass, "__name__", None) or type(graph_pass).__name__


def run_passes(gm: torch.fx.GraphModule, passes: Iterable[GraphPass]) -> dict[str, int]:
    """Run ``passes`` in order on ``gm``; returns rewrites per pass name (passes that changed nothing
    included, with 0). After a pass that rewrote something, dead code is removed and ``gm`` recompiled."""
    counts: dict[str, int] = {}
    for graph_pass in passes:
        name = pass_name(graph_pass)
        n = graph_pass(gm)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TypeError(f"dicp: graph pass {name} returned {n!r}; a pass returns its rewrite count (int >= 0)")
        counts[name] = counts.get(name, 0) + n
        if n:
            gm.graph.eliminate_dead_code()
            gm.graph.lint()
            gm.recompile()
    return counts


def _permutation(node: torch.fx.Node) -> list[int] | None:
    """The dims permutation a ``permute``/``transpose``/``t`` node applies, or None for another node."""
    val = node.meta.get("val")
    if node.op != "call_function" or not isinstance(val, torch.Tensor):
        return None
    rank = val.dim()
    if node.target is aten.permute.default:
        return [d % rank if rank else 0 for d in node.args[1]]
    if node.target is aten.transpose.int:
        a, b = (d % rank if rank else 0 for d in node.args[1:3])
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
        return perm
    if node.target is aten.t.default:
        return [1, 0] if rank == 2 else list(range(rank))
    return None


def fold_transposes(gm: torch.fx.GraphModule) -> int:
    """Two consecutive permutes/transposes (``aten.permute``, ``aten.transpose.int``, ``aten.t``) become one
    ``aten.permute`` with the composed permutation, or nothing when they cancel. The inner one stays if
    something else reads it (dead code is removed by :func:`run_passes`). Returns the number of folds."""
    folds = 0
    erased: set[torch.fx.Node] = set()
    for node in list(gm.graph.nodes):
        if node in erased:
            continue
        outer = _permutation(node)
        if outer is None:
            continue
        inner_node = node.args[0]
        if not isinstance(inner_node, torch.fx.Node):
            continue
        inner = _permutation(inner_node)
        if inner is None or len(inner) != len(outer):
            continue
        source = inner_node.args[0]
        # out[i] = mid[outer[i]] = src[inner[outer[i]]]
        composed = [inner[d] for d in outer]
        if composed == list(range(len(composed))):
            node.replace_all_uses_with(source)
        else:
            with gm.graph.inserting_before(node):
                folded = gm.graph.call_function(aten.permute.default, (source, composed))
            folded.meta.update(node.meta)
            node.replace_all_uses_with(folded)
        gm.graph.erase_node(node)
        erased.add(node)
        folds += 1
    return folds


#: Random operators whose result depends on their tensor argument's shape, dtype and strides, not its values.
_SHAPE_ONLY_DRAWS = (aten.bernoulli.p, aten.rand_like.default, aten.randn_like.default, aten.randint_like.default,
                     aten.randint_like.low_dtype)


def _static(val: object) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape)


def draws_apart(gm: torch.fx.GraphModule) -> int:
    """Random draws apart from the values they are drawn beside, so that they read no computed tensor and run
    eagerly beside a vendor island instead of cutting the graph into islands (static shapes only):

    - a training ``native_dropout(x, p)`` becomes PyTorch's own ``native_dropout`` on a tensor of ones of ``x``'s
      shape and dtype (the same draws from the same generator as on ``x``: the mask depends on no value), then
      ``x * mask * scale`` as eager computes it, for the vendor: mask and output are eager's, bit for bit;
    - ``bernoulli(x, p)``, ``rand_like(x)``, ``randn_like(x)``, ``randint_like(x, ...)`` draw on an empty tensor of
      ``x``'s shape, dtype and device instead of ``x`` (they never read its values; ``x`` contiguous).

    Returns the draws moved apart."""
    split = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _SHAPE_ONLY_DRAWS:
            source = node.args[0]
            val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
            if _static(val) and source.op != "placeholder" and val.is_contiguous():
                with gm.graph.inserting_before(node):
                    empty = gm.graph.call_function(aten.empty.memory_format, (list(val.shape),),
                                                   {"dtype": val.dtype, "device": val.device})
                empty.meta["val"] = val
                node.replace_input_with(source, empty)
                split += 1
            continue
        if node.target is not aten.native_dropout.default:
            continue
        arguments = call_arguments(node)  # read by schema names, as the partitioner does
        x, p, train = arguments["input"], arguments["p"], arguments.get("train")
        out_val, mask_val = node.meta["val"]
        readers = list(node.users)
        if (train is False or not isinstance(p, (int, float)) or not _static(out_val)
                or any(u.target is not operator.getitem for u in readers)):
            continue  # symbolic sizes or an unusual graph: the node stays as it is (eager)
        scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
        graph = gm.graph
        with graph.inserting_before(node):
            ones = graph.call_function(aten.ones.default, (list(out_val.shape),),
                                       {"dtype": out_val.dtype, "device": out_val.device})
            drawn = graph.call_function(aten.native_dropout.default, (ones, p, train))
            mask = graph.call_function(operator.getitem, (drawn, 1))
            kept = graph.call_function(aten.mul.Tensor, (x, mask))
            out = graph.call_function(aten.mul.Tensor, (kept, scale))
        for new, val in ((ones, out_val), (drawn, (out_val, mask_val)), (mask, mask_val), (kept, out_val),
                         (out, out_val)):
            new.meta["val"] = val
        for reader in readers:
            reader.replace_all_uses_with(out if reader.args[1] == 0 else mask)
            graph.erase_node(reader)
        graph.erase_node(node)
        split += 1
    return split
