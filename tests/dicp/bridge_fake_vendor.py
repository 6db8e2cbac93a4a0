"""A tiny in-test vendor for the bridge's tests: its "artifact" is a JSON list of the island's operators and its
runner interprets the island with PyTorch (``torch.fx.Interpreter``), optionally with one operator replaced
(a deliberately wrong conversion). Importable from a subprocess (``sys.path`` + ``import bridge_fake_vendor``).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

import torch

from dicp.dynamo_bridge import ConversionRegistry, Vendor
from dicp.dynamo_bridge.partition import op_name

aten = torch.ops.aten

#: What the fake vendor converts (cumsum and every random op are missing).
SUPPORTED = [
    aten.add, aten.sub, aten.mul, aten.div, aten.neg, aten.relu, aten.sin, aten.cos, aten.exp, aten.tanh,
    aten.mm, aten.bmm, aten.addmm, aten.t, aten.permute, aten.transpose, aten.view, aten._unsafe_view, aten.sum,
    aten.mean, aten.threshold_backward, aten.expand, aten.clone, aten.detach, aten.pow, aten.sigmoid,
]


def make_vendor(name: str = "fake", *, wrong: dict[Any, Callable[..., Any]] | None = None,
                compile_hook: Callable[[torch.fx.GraphModule], None] | None = None,
                load_hook: Callable[[torch.fx.GraphModule], None] | None = None,
                calls: list[str] | None = None) -> Vendor:
    """A fake vendor: ``wrong`` maps ATen overloads to replacements its runner uses instead (mul -> add),
    ``compile_hook`` runs inside compile (to raise, or to call ``int()`` on a symbolic size), ``load_hook``
    inside load (to raise as a runtime's session creation may), ``calls``
    collects ``compile:<ops>`` / ``load`` entries."""
    registry = ConversionRegistry(name)

    @registry.register(SUPPORTED)
    def convert(ctx: Any, *args: Any) -> None:
        """The fake vendor's conversions do nothing: its runner interprets the island."""

    replacements = dict(wrong or {})

    def compile_island(gm: torch.fx.GraphModule) -> bytes:
        ops = [op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        if calls is not None:
            calls.append("compile:" + ",".join(ops))
        if compile_hook is not None:
            compile_hook(gm)
        return json.dumps(ops).encode()

    def load(artifact: bytes, gm: torch.fx.GraphModule) -> Callable[..., list[torch.Tensor]]:
        ops = json.loads(artifact.decode())
        expected = [op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        if ops != expected:
            raise ValueError(f"fake vendor: artifact {ops} does not match the island {expected}")
        if load_hook is not None:
            load_hook(gm)
        if calls is not None:
            calls.append("load")

        class Run(torch.fx.Interpreter):
            def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
                if target is not operator.getitem and target in replacements:
                    return replacements[target](*args, **kwargs)
                return super().call_function(target, args, kwargs)

        def runner(*inputs: Any) -> list[torch.Tensor]:
            with torch.no_grad():
                return list(Run(gm).run(*inputs))

        return runner

    return Vendor(name=name, conversions=registry, compile=compile_island, load=load,
                  versions=lambda: {"fake": "1"})


def sample_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Two vendor islands around an eager cumsum (the cache test compiles it in two processes)."""
    y = torch.relu(x @ w) * 2
    return torch.cumsum(y, 1).sin() + y
