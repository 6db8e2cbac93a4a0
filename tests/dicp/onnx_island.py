"""Test helper: an ATen function traced by ``make_fx`` -> a vendor island (what the bridge's partitioner hands a
vendor) -> compiled and loaded by a vendor -> run on real inputs.

Nodes whose value is not a tensor (SymInt sizes) become island inputs, their values computed by running the
traced graph eagerly on the real inputs (the partitioner does the same in production)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

__all__ = ["Island", "trace_island"]


def _is_tensor_val(val: Any) -> bool:
    if isinstance(val, torch.Tensor):
        return True
    return isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val)


class Island:
    """A traced graph turned into a vendor island, and how to compute its inputs from the function's inputs."""

    def __init__(self, traced: torch.fx.GraphModule) -> None:
        self.traced = traced
        graph = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        self.sym_nodes: list[torch.fx.Node] = []
        tensor_placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
        for node in tensor_placeholders:
            env[node] = graph.placeholder(node.name)
            env[node].meta = dict(node.meta)
        computed = [n for n in traced.graph.nodes
                    if n.op == "call_function" and not _is_tensor_val(n.meta.get("val"))]
        for node in computed:
            env[node] = graph.placeholder(node.name)
            env[node].meta = dict(node.meta)
            self.sym_nodes.append(node)
        outputs: list[torch.fx.Node] = []
        for node in traced.graph.nodes:
            if node.op == "call_function" and node not in env:
                env[node] = graph.node_copy(node, lambda n: env[n])
            elif node.op == "output":
                flat, _ = torch.utils._pytree.tree_flatten(node.args[0])
                outputs = [env[n] for n in flat if isinstance(n, torch.fx.Node)]
        graph.output(tuple(outputs))
        self.gm = torch.fx.GraphModule({}, graph)

    @property
    def shape_env(self) -> Any:
        for node in self.gm.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor) and getattr(val, "fake_mode", None) is not None:
                return val.fake_mode.shape_env
        return None

    def inputs(self, *args: torch.Tensor) -> list[Any]:
        """The island's inputs for the function's real inputs ``args``."""
        values: dict[torch.fx.Node, Any] = {}
        wanted = set(self.sym_nodes)

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n: torch.fx.Node) -> Any:
                result = super().run_node(n)
                if n in wanted:
                    values[n] = result
                return result

        if wanted:
            Recorder(self.traced).run(*args)
        return [*args, *(values[n] for n in self.sym_nodes)]


def trace_island(fn: Callable[..., Any], args: list[torch.Tensor], dynamic: bool,
                 decompositions: dict[Any, Any] | None = None) -> Island:
    """``fn`` traced on ``args`` (fake tensors; ``dynamic``: symbolic sizes) as an :class:`Island`."""
    traced = make_fx(fn, decomposition_table=decompositions or {},
                     tracing_mode="symbolic" if dynamic else "fake")(*args)
    return Island(traced)


def compile_checked(island: Island, vendor: Any) -> Callable[..., list[torch.Tensor]]:
    """``vendor``'s runner for ``island``, after asserting that the vendor converts every node and that its
    compile and load add no shape guard."""
    for node in island.gm.graph.nodes:
        if node.op == "call_function":
            assert vendor.conversions.unsupported(node) is None, vendor.conversions.unsupported(node)
    shape_env = island.shape_env
    guards = len(shape_env.guards) if shape_env is not None else 0
    runner = vendor.load(vendor.compile(island.gm), island.gm)
    if shape_env is not None:
        assert len(shape_env.guards) == guards, "conversion added guards"
    return runner
