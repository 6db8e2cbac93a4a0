"""Single-op tests of the onnxgraph vendor: each case of onnx_op_table traced by make_fx (static and symbolic
shapes), turned into a vendor island, compiled to ONNX, run by ONNX Runtime and compared with eager."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
from onnx_island import compile_checked, trace_island
from onnx_op_table import CASES, Case

from diopi.compare import all_passed, compare_outputs

pytest.importorskip("onnxruntime")

from dicp.vendor.onnxgraph import vendor  # noqa: E402

SIZES = (4, 6)


def _flat(out: Any) -> list[torch.Tensor]:
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _check(case: Case, dynamic: bool) -> None:
    v = vendor()
    torch.manual_seed(0)
    inputs = case.make(SIZES[0])
    island = trace_island(case.fn, inputs, dynamic, v.decompositions)
    runner = compile_checked(island, v)
    for n in SIZES if dynamic else SIZES[:1]:
        torch.manual_seed(n)
        args = case.make(n)
        expected = _flat(case.fn(*args))
        actual = runner(*island.inputs(*args))
        results = compare_outputs(actual, expected, op=case.name)
        assert all_passed(results), f"{case.name} n={n}: " + "; ".join(r.message for r in results if r.message)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_static(case: Case) -> None:
    _check(case, dynamic=False)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_dynamic(case: Case) -> None:
    _check(case, dynamic=True)


def test_op_table_covers_200_overloads() -> None:
    """The table exercises at least 200 distinct converted ATen overloads (after the vendor's decompositions).
    Traced here, whatever ran before: under pytest-xdist the op tests are spread over several processes."""
    targets: set = set()
    for case in CASES:
        torch.manual_seed(0)
        island = trace_island(case.fn, case.make(SIZES[0]), False, vendor().decompositions)
        targets.update(n.target for n in island.gm.graph.nodes if n.op == "call_function")
    overloads = {t for t in targets if isinstance(t, torch._ops.OpOverload)} - {operator.getitem}
    assert len(overloads) >= 200, sorted(str(t) for t in overloads)
