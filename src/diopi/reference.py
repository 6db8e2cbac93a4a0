"""Judging a device result against a CPU result, with a float64 reference computed only when needed.

The CPU result in the device's dtype decides most calls at once (:func:`diopi.compare.compare_outputs`). Only
when an output is outside the tolerance is the float64 reference worth its cost: the same call is run again on
float64 copies of the inputs (:func:`widen`), and the output is NOISE when its error against float64 is within
``noise_factor`` times the CPU's own. op_tools' OpAutoCompare and torch_dipu's device-level auto-compare
(``DIPU_AUTOCOMPARE_OPS_LIST``) both judge this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from diopi.compare import TensorComparison, Verdict, compare_outputs
from diopi.tensor_walk import tensors_in

__all__ = ["has_floating", "judge_outputs", "widen"]


def has_floating(value: Any) -> bool:
    """Whether a (nested) value holds a floating-point or complex tensor."""
    return any((t.is_floating_point() or t.is_complex()) for t in tensors_in(value))


def widen(value: Any) -> Any:
    """``value`` with every floating tensor replaced by a float64 copy (complex: complex128); other tensors
    and values are kept. The same tensor met twice gets one copy, so aliasing arguments stay aliased."""
    copies: dict[int, torch.Tensor] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if not (v.is_floating_point() or v.is_complex()):
                return v
            if id(v) not in copies:
                target = torch.complex128 if v.is_complex() else torch.float64
                copies[id(v)] = v.detach().to(target, copy=True)
            return copies[id(v)]
        if type(v) is list:
            return [walk(x) for x in v]
        if type(v) is tuple:
            return tuple(walk(x) for x in v)
        if type(v) is dict:
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(value)


def judge_outputs(actual: Any, expected: Any, wide_reference: Callable[[], Any] | None = None, *,
                  op: str | None = None, atol: float | None = None, rtol: float | None = None,
                  noise_factor: float = 2.0) -> list[TensorComparison]:
    """:func:`~diopi.compare.compare_outputs` of ``actual`` against ``expected``; when an output FAILs and
    ``expected`` holds floating tensors, ``wide_reference()`` gives the float64 result of the same call and the
    outputs are judged again with it (the noise floor). A ``wide_reference`` returning None or raising (no
    float64 kernel) leaves the verdicts to the tolerance alone."""
    comparisons = compare_outputs(actual, expected, op=op, atol=atol, rtol=rtol, noise_factor=noise_factor)
    if wide_reference is None or not any(c.verdict == Verdict.FAIL for c in comparisons) \
            or not has_floating(expected):
        return comparisons
    try:
        wide = wide_reference()
    except Exception:  # no float64 kernel for this call: judge by the tolerance alone
        wide = None
    if wide is None:
        return comparisons
    return compare_outputs(actual, expected, expected_fp64=wide, op=op, atol=atol, rtol=rtol,
                           noise_factor=noise_factor)
