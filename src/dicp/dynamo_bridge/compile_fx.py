"""The backend factory: :func:`make_backend` turns a :class:`Vendor` into a dynamo backend on AOTAutograd.

Each ATen graph AOTAutograd produces (forward, backward, inference) goes through :func:`compile_graph`:

1. the vendor's ``rewrite_passes`` then ``layout_passes`` (rewrites counted in the report);
2. partitioning (:mod:`.partition`): vendor islands and eager islands; every op that stays eager is counted
   and named once on stderr;
3. per vendor island: compile cache lookup (:mod:`.cache`) -> ``vendor.compile`` -> store -> ``vendor.load``;
   the island's nodes are replaced by one call of the runner. The ShapeEnv's guards are counted before and
   after the vendor's compile: a converter that specializes a symbolic size is reported (``guards_added``)
   and warned about;
4. a vendor compile failure is a :class:`DicpCompileError` naming the vendor, the node and the operator: printed
   once, and the island runs eagerly (the user's model is never lost); with ``DICP_STRICT=1`` it is raised.
"""

from __future__ import annotations

import collections
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..config import dicp_config
from . import report
from .cache import CompileCache, cache_key
from .partition import Island, extract_island, finish, op_name, plan_partition, replace_island
from .passes import run_passes
from .precision import check_outputs
from .vendor import Vendor

__all__ = ["DicpCompileError", "compile_graph", "make_backend"]

KINDS = ("forward", "backward", "inference")


class DicpCompileError(RuntimeError):
    """A vendor failed to compile an island; the message names the vendor, the node and its operator, and the
    vendor's own exception is the ``__cause__``."""


class IslandRunner(torch.nn.Module):
    """The outer graph's call of one compiled vendor island: runs the vendor's runner (and, with
    ``DICP_PRECISION_CHECK=1``, the island eagerly for comparison); returns a tuple of tensors."""

    def __init__(self, vendor: str, kind: str, ops: list[str], runner: Callable[..., Sequence[torch.Tensor]],
                 island: torch.fx.GraphModule, precision_check: bool) -> None:
        super().__init__()
        self.vendor, self.kind, self.ops = vendor, kind, ops
        self.runner = runner
        self.precision_check = precision_check
        self._island = [island]  # a list: not a registered submodule of the outer graph

    def forward(self, *args: Any) -> tuple[torch.Tensor, ...]:
        # AOTAutograd differentiates around the compiled graphs, never through them: a runner gets plain
        # tensors (parameters arrive with requires_grad=True, which DLPack and buffer exports refuse)
        args = tuple(a.detach() if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args)
        outputs = tuple(self.runner(*args))
        if self.precision_check:
            check_outputs(self.vendor, self.kind, self.ops, self._island[0], args, outputs)
        return outputs


def _shape_env(gm: torch.fx.GraphModule) -> Any:
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    fake_mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    shape_env = getattr(fake_mode, "shape_env", None)
    if shape_env is None:
        for v in vals:
            if isinstance(v, torch.SymInt):
                return v.node.shape_env
    return shape_env


def _failing_node(vendor: Vendor, island: Island, exc: BaseException) -> torch.fx.Node | None:
    """The island node the vendor failed on: ``exc.node`` when the vendor says, else the first node that fails
    to compile on its own (with the getitems of a multi-output node)."""
    named = getattr(exc, "node", None)
    nodes = [n for n in island.gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    if isinstance(named, torch.fx.Node):
        return named
    if isinstance(named, str):
        return next((n for n in nodes if n.name == named), None)
    for node in nodes:
        members = [node, *(u for u in node.users if u.target is operator.getitem)]
        try:
            single = extract_island(island.gm, members)
        except AssertionError:
            continue
        try:
            vendor.load(vendor.compile(single.gm), single.gm)
        except Exception:  # noqa: BLE001 - any failure names this node
            return node
    return None


def _compile_error(vendor: Vendor, kind: str, island: Island, exc: Exception, step: str) -> DicpCompileError:
    node = _failing_node(vendor, island, exc)
    where = (f"node {node.name} ({op_name(node.target)})" if node is not None
             else f"an island of [{', '.join(island.ops())}]")
    return DicpCompileError(f"dicp {vendor.name}: {step} the {kind} graph failed at {where}: "
                            f"{type(exc).__name__}: {exc}")


def _vendor_compile(vendor: Vendor, kind: str, island: Island) -> bytes:
    try:
        artifact = vendor.compile(island.gm)
    except Exception as exc:
        raise _compile_error(vendor, kind, island, exc, "compiling") from exc
    if not isinstance(artifact, (bytes, bytearray)):
        raise DicpCompileError(f"dicp {vendor.name}: compile returned {type(artifact).__name__}, not bytes "
                               f"(island [{', '.join(island.ops())}])")
    return bytes(artifact)


def _vendor_load(vendor: Vendor, kind: str, island: Island, artifact: bytes) -> Callable[..., Any]:
    try:
        return vendor.load(artifact, island.gm)
    except Exception as exc:
        raise _compile_error(vendor, kind, island, exc, "loading") from exc


def _check_guards(vendor: Vendor, island: Island, shape_env: Any, before: int) -> None:
    """Count and warn about the shape guards added since ``before`` (converters must add none)."""
    added = shape_env.guards[before:] if shape_env is not None else []
    if added:
        report.count(vendor.name, "guards_added", len(added))
        exprs = "; ".join(str(g.expr) for g in added[:4])
        warnings.warn(f"dicp {vendor.name}: compiling the island [{', '.join(island.ops())}] added "
                      f"{len(added)} shape guard(s) ({exprs}): a converter specialized a symbolic size",
                      UserWarning, stacklevel=3)


def _build(vendor: Vendor, kind: str, island: Island, shape_env: Any) -> Callable[..., Sequence[torch.Tensor]]:
    """Cache lookup -> compile -> store -> load for one island; returns the runner."""
    config = dicp_config()
    cache = CompileCache(config.cache_dir, vendor.name) if config.cache else None
    key, key_inputs = cache_key(vendor, island.gm) if cache is not None else ("", {})
    guards_before = len(shape_env.guards) if shape_env is not None else 0
    if cache is not None:
        status, artifact = cache.lookup(key)
        if status == "hit":
            try:
                runner = vendor.load(artifact, island.gm)
            except Exception:  # noqa: BLE001 - an artifact the vendor cannot load is rebuilt, not trusted
                status = "corrupt"
            else:
                report.count(vendor.name, "cache_hits")
                _check_guards(vendor, island, shape_env, guards_before)
                return runner
        report.count(vendor.name, "cache_rebuilt" if status == "corrupt" else "cache_misses")
    artifact = _vendor_compile(vendor, kind, island)
    if config.shape_check and vendor.check_shapes is not None:
        for line in vendor.check_shapes(artifact, island.gm) or []:
            warnings.warn(f"dicp {vendor.name} shape check: {line}", UserWarning, stacklevel=2)
            report.count(vendor.name, "shape_mismatches")
    runner = _vendor_load(vendor, kind, island, artifact)
    _check_guards(vendor, island, shape_env, guards_before)
    if cache is not None:
        try:
            cache.store(key, artifact, key_inputs)
        except OSError as exc:  # a full disk or a read-only folder costs the reuse, not the compile
            warnings.warn(f"dicp {vendor.name}: cannot write the compile cache in {cache.folder}: {exc}",
                          UserWarning, stacklevel=2)
    return runner


def compile_graph(vendor: Vendor, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                  kind: str) -> torch.fx.GraphModule:
    """Compile one ATen graph of AOTAutograd (``kind``: forward, backward or inference) in place: vendor
    islands become calls of their runners, the rest runs eagerly. Returns ``gm``."""
    if kind not in KINDS:
        raise ValueError(f"dicp: graph kind {kind!r}; expected one of {', '.join(KINDS)}")
    report.count(vendor.name, f"graphs_{kind}")
    for name, n in run_passes(gm, [*vendor.rewrite_passes, *vendor.layout_passes]).items():
        if n:
            report.count_op(vendor.name, "rewrites", name, n)
    plan = plan_partition(gm, vendor.conversions)
    by_op: dict[str, list[str]] = collections.defaultdict(list)
    for node, reason in plan.eager.items():
        by_op[op_name(node.target)].append(reason)
    for op, reasons in by_op.items():
        report.note_eager_op(vendor.name, op, reasons[0], len(reasons))
    report.count(vendor.name, "eager_islands", plan.eager_islands)
    report.count(vendor.name, "returned_views", len(plan.views))
    if dicp_config().report:
        report.print_islands(vendor.name, kind, [len(nodes) for nodes in plan.vendor],
                             [[(n.name, plan.eager[n]) for n in group] for group in plan.eager_groups])
    report.count(vendor.name, "vendor_islands", len(plan.vendor))
    if not plan.vendor:
        return gm
    shape_env = _shape_env(gm)
    precision_check = dicp_config().precision_check
    fake_mode = getattr(shape_env, "fake_mode", None)
    for i, nodes in enumerate(plan.vendor):
        island = extract_island(gm, nodes, fake_mode)
        try:
            runner = _build(vendor, kind, island, shape_env)
        except DicpCompileError as exc:
            if dicp_config().strict:
                raise
            report.note_compile_failure(vendor.name, str(exc), len(island.ops()))
            continue  # the island's nodes stay in the graph: they run eagerly
        module = IslandRunner(vendor.name, kind, island.ops(), runner, island.gm, precision_check)
        replace_island(gm, island, nodes, f"dicp_{kind}_island_{i}", module)
    finish(gm)
    return gm


def make_backend(vendor: Vendor) -> Callable[..., Any]:
    """A dynamo backend ``(gm, example_inputs, **kwargs) -> callable`` for ``vendor``: AOTAutograd with the
    vendor's decompositions and forward, backward and inference compilers that call :func:`compile_graph`.

    ``torch.compile(model, backend=make_backend(vendor))``; a vendor package registers the result under the
    ``torch_dynamo_backends`` entry point group so that ``backend="<vendor.name>"`` works.
    """
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    def compiler(kind: str) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]:
        def compile_one(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
            return make_boxed_func(compile_graph(vendor, gm, example_inputs, kind).forward)

        compile_one.__name__ = f"dicp_{vendor.name}_{kind}_compiler"
        return compile_one

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        aot = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"), decompositions=dict(vendor.decompositions),
                           partition_fn=min_cut_rematerialization_partition)
        return aot(gm, example_inputs)

    backend.__name__ = vendor.name
    backend.__qualname__ = vendor.name
    return backend
