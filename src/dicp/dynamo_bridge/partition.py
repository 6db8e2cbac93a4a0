"""Cut an ATen graph into vendor islands (nodes the vendor converts) and eager islands (the rest, run by PyTorch).

A ``call_function`` node goes to a vendor island when its value is a tensor (or a tuple of tensors read only
through ``operator.getitem``), it is not a random operator, and the vendor's registry converts it
(:meth:`~dicp.dynamo_bridge.conversion.ConversionRegistry.unsupported` is None). Nodes whose value is not a
tensor (``sym_size``, SymInt arithmetic, Python scalars) stay in the outer graph: an island receives symbolic
sizes as plain inputs. Islands are maximal groups that create no cycle (``CapabilityBasedPartitioner``: connected
nodes, then independent groups merged when no path through an eager node joins them, so a graph with no
eager op is one island: one vendor call). :func:`extract_island` builds the island's
``GraphModule`` as :mod:`dicp.dynamo_bridge.vendor` defines it, :func:`replace_island` swaps its nodes for one
call of a module.
"""

from __future__ import annotations

import dataclasses
import heapq
import operator
from typing import Any

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from .conversion import ConversionRegistry
from .conversion import _name as op_name  # re-exported: the name every report and cache key uses

__all__ = ["Island", "Plan", "extract_island", "finish", "op_name", "plan_partition", "replace_island"]


def _is_tensor_value(val: Any) -> bool:
    if isinstance(val, torch.Tensor):
        return True
    return isinstance(val, (tuple, list)) and len(val) > 0 and all(isinstance(v, torch.Tensor) for v in val)


#: AOTAutograd's functional form of a mutating custom operator: ``(op outputs..., new values of the mutated
#: inputs)``, None where a mutable optional argument was None (copied back into the inputs after the graph).
_FUNCTIONALIZED = tuple(getattr(torch.ops.higher_order, n) for n in ("auto_functionalized", "auto_functionalized_v2")
                        if hasattr(torch.ops.higher_order, n))


def _node_is_tensor_value(node: torch.fx.Node) -> bool:
    """The node's value is a tensor or a tuple of tensors (for a functionalized mutation: None entries allowed)."""
    val = node.meta.get("val")
    if _is_tensor_value(val):
        return True
    return (node.target in _FUNCTIONALIZED and isinstance(val, (tuple, list))
            and any(isinstance(v, torch.Tensor) for v in val)
            and all(v is None or isinstance(v, torch.Tensor) for v in val))


def call_arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The arguments of an operator call node by their schema names (positional, keyword or default)."""
    values: dict[str, Any] = {}
    for i, arg in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
    return values


def _is_random(node: torch.fx.Node) -> bool:
    """A random draw: an operator tagged ``nondeterministic_seeded``, unless its dropout probability is 0 or it
    is not training (``scaled_dot_product_attention`` with ``dropout_p=0.0``, ``native_dropout(train=False)``)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    values = call_arguments(node)
    if any(values.get(name) in (0, 0.0) and not isinstance(values.get(name), bool) for name in ("dropout_p", "p")):
        return False
    return values.get("train") is not False


@dataclasses.dataclass
class Plan:
    """How a graph is cut: ``vendor`` islands (node lists, graph order), the ``eager`` nodes with the reason
    each stays eager, the number of ``eager_islands`` (connected groups of eager nodes), and the returned
    ``views`` of graph inputs, which stay PyTorch's views (no computation: neither vendor nor eager op)."""

    vendor: list[list[torch.fx.Node]]
    eager: dict[torch.fx.Node, str]
    eager_islands: int
    views: set[torch.fx.Node] = dataclasses.field(default_factory=set)
    #: The eager islands' nodes (getitems left out), in graph order.
    eager_groups: list[list[torch.fx.Node]] = dataclasses.field(default_factory=list)


def _vendor_reason(node: torch.fx.Node, registry: ConversionRegistry, accepted: set[torch.fx.Node]) -> str | None:
    """None when ``node`` belongs in a vendor island, else why not; ``""`` for a node that is not a tensor
    computation at all (not reported as an eager op)."""
    val = node.meta.get("val")
    if node.op != "call_function" or not _node_is_tensor_value(node):
        return ""
    if node.target is operator.getitem:
        parent = node.args[0]
        return None if isinstance(val, torch.Tensor) and parent in accepted else ""
    name = op_name(node.target)
    if _is_random(node):
        return f"{name} is random (the eager generator's stream is kept)"
    if not isinstance(val, torch.Tensor) and any(u.target is not operator.getitem for u in node.users):
        return f"{name}: a tuple result read other than by getitem"
    reason = registry.unsupported(node)
    if reason is None:
        return None
    prefix = f"no conversion for {name}"
    return f"{name} has no conversion" if reason == prefix else reason


class _Support(OperatorSupportBase):
    def __init__(self, accepted: set[torch.fx.Node]) -> None:
        self.accepted = accepted

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node in self.accepted


def _groups(nodes: set[torch.fx.Node], order: dict[torch.fx.Node, int]) -> list[list[torch.fx.Node]]:
    """The connected groups of ``nodes`` (edges between members only), each in graph order."""
    parent = {n: n for n in nodes}

    def find(n: torch.fx.Node) -> torch.fx.Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in nodes:
        for m in n.all_input_nodes:
            if m in parent:
                parent[find(m)] = find(n)
    groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for n in sorted(nodes, key=order.__getitem__):
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


def _returned_views(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """View nodes (``expand``, ``t``, ...; views of views too) of a graph input that nothing but the graph's output
    reads. AOTAutograd rebuilds a returned alias of an input from the input itself, with dynamic shapes by the
    strides of what the compiled graph returned: those must be PyTorch's own view, not a vendor's dense copy."""
    from_input: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or (node.op == "call_function" and getattr(node.target, "is_view", False)
                                        and node.args and node.args[0] in from_input):
            from_input.add(node)
    returned: set[torch.fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if node.op == "call_function" and node in from_input and node.users and all(
                u.op == "output" or u in returned for u in node.users):
            returned.add(node)
    return returned


def plan_partition(gm: torch.fx.GraphModule, registry: ConversionRegistry) -> Plan:
    """Decide which nodes of ``gm`` form vendor islands (``gm`` is not changed)."""
    accepted: set[torch.fx.Node] = set()
    eager: dict[torch.fx.Node, str] = {}
    returned = _returned_views(gm)
    for node in gm.graph.nodes:
        if node in returned:
            continue
        reason = _vendor_reason(node, registry, accepted)
        if reason is None:
            accepted.add(node)
        elif reason:
            eager[node] = reason
    # a tensor made from no tensor (``ones`` for a random draw) that only eager nodes read stays with them: in a
    # vendor island of its own it would cut the graph (its reader needs it before the island runs)
    for node in reversed(gm.graph.nodes):
        if (node in accepted and node.users and all(u in eager for u in node.users)
                and not any(_node_is_tensor_value(a) for a in node.all_input_nodes)):
            accepted.discard(node)
    # getitem of an eager multi-output node: eager too, but not an op of its own
    eager_group = set(eager) | {n for n in gm.graph.nodes if n.target is operator.getitem and n.args[0] in eager}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    islands: list[list[torch.fx.Node]] = []
    if accepted:
        partitioner = CapabilityBasedPartitioner(gm, _Support(accepted), allows_single_node_partition=True)
        for partition in partitioner.propose_partitions():
            nodes = sorted(partition.nodes, key=order.__getitem__)
            if any(_node_is_tensor_value(n) and n.target is not operator.getitem for n in nodes):
                islands.append(nodes)
    islands.sort(key=lambda nodes: order[nodes[0]])
    groups = _groups(eager_group, order)
    return Plan(vendor=islands, eager=eager, eager_islands=len(groups), views=returned,
                eager_groups=[[n for n in group if n in eager] for group in groups])


@dataclasses.dataclass
class Island:
    """One vendor island: its GraphModule, the outer nodes it reads (placeholder order) and the island nodes
    the outer graph reads (output order)."""

    gm: torch.fx.GraphModule
    inputs: list[torch.fx.Node]
    outputs: list[torch.fx.Node]

    def ops(self) -> list[str]:
        """The island's operator names, in graph order, without repeats."""
        names = (op_name(n.target) for n in self.gm.graph.nodes if n.op == "call_function")
        return list(dict.fromkeys(names))


def _placeholder_val(node: torch.fx.Node, gm: torch.fx.GraphModule, fake_mode: Any) -> Any:
    val = node.meta.get("val")
    if val is None and node.op == "get_attr" and fake_mode is not None:
        real = getattr(gm, str(node.target))
        if isinstance(real, torch.Tensor):
            val = fake_mode.from_tensor(real)
    return val


def extract_island(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node], fake_mode: Any = None) -> Island:
    """The island GraphModule of ``nodes`` (graph order): placeholders for the outer values they read (with
    ``meta["val"]``), copies of the nodes, one output returning a flat tuple of the values read outside."""
    members = set(nodes)
    inputs: list[torch.fx.Node] = []
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in members and arg not in inputs:
                inputs.append(arg)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for i, arg in enumerate(inputs):
        placeholder = graph.placeholder(f"in{i}_{arg.name}")
        placeholder.meta["val"] = _placeholder_val(arg, gm, fake_mode)
        env[arg] = placeholder
    for node in nodes:
        copied = graph.node_copy(node, env.__getitem__)
        copied.meta = dict(node.meta)
        env[node] = copied
    outputs = [n for n in nodes if any(u not in members for u in n.users)]
    for out in outputs:
        if not isinstance(out.meta.get("val"), torch.Tensor):
            raise AssertionError(f"dicp: island output {out.format_node()} is not a tensor")
    output = graph.output(tuple(env[n] for n in outputs))
    output.meta["val"] = tuple(n.meta["val"] for n in outputs)
    island_gm = torch.fx.GraphModule(gm, graph, class_name="DicpIsland")
    return Island(island_gm, inputs, outputs)


def replace_island(gm: torch.fx.GraphModule, island: Island, nodes: list[torch.fx.Node], name: str,
                   module: torch.nn.Module) -> None:
    """Replace ``nodes`` in ``gm`` by one call of ``module`` (added as ``gm.<name>``) returning the island's
    outputs as a tuple; the graph is re-sorted topologically (call :func:`finish` after the last island)."""
    gm.add_submodule(name, module)
    with gm.graph.inserting_after(nodes[-1]):
        call = gm.graph.call_module(name, tuple(island.inputs))
    call.meta["val"] = tuple(n.meta["val"] for n in island.outputs)
    for i, out in enumerate(island.outputs):
        with gm.graph.inserting_after(call):
            item = gm.graph.call_function(operator.getitem, (call, i))
        item.meta["val"] = out.meta["val"]
        out.replace_all_uses_with(item)
    for node in reversed(nodes):
        gm.graph.erase_node(node)


def _stable_sort(graph: torch.fx.Graph) -> None:
    """Sort ``graph`` topologically, keeping every node as early in its old order as its inputs allow (so
    eager side effects and random draws keep their order)."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: len(set(n.all_input_nodes)) for n in nodes}
    ready = [(index[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[torch.fx.Node] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for user in node.users:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (index[user], user))
    if len(order) != len(nodes):
        raise AssertionError("dicp: the partitioned graph has a cycle")
    for before, node in zip(order, order[1:], strict=False):
        if node.prev is not before:
            before.append(node)


def finish(gm: torch.fx.GraphModule) -> None:
    """Topologically re-sort ``gm`` after islands were replaced (stable), check it, recompile it."""
    _stable_sort(gm.graph)
    gm.graph.lint()
    gm.recompile()
