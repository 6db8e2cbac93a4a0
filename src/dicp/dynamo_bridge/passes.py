"""Graph passes: run a list of :data:`~dicp.dynamo_bridge.vendor.GraphPass` with counts, and generic passes a
vendor may put in its ``layout_passes`` (:func:`fold_transposes`).

A pass rewrites a ``torch.fx.GraphModule`` in place and returns how many rewrites it made; :func:`run_passes`
removes dead code and recompiles the module after any pass that changed something.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .vendor import GraphPass

__all__ = ["fold_transposes", "pass_name", "run_passes"]

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
