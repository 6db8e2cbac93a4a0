"""How two results are judged: the one comparison engine every ditorch tool uses.

A device result (``actual``) is compared with the CPU result in the same dtype (``expected``) and,
optionally, with a float64 reference (``expected_fp64``). Each output tensor gets a
:class:`TensorComparison` with its metrics (computed in float64) and a :class:`Verdict`:

- ``PASS``: every element is within ``(atol, rtol)`` (``torch.isclose`` semantics, NaN equals NaN);
- ``PASS (noise)``: outside the tolerance, but the device's error against float64 is no worse than
  ``noise_factor`` times the CPU's error against float64 in the same dtype;
- ``FAIL``: otherwise, or when NaN/Inf placement, shape, dtype or structure differ. Integer and
  boolean results must match exactly.

Tolerances default to ``torch.testing.assert_close``'s and are overridable by environment variables
(see :func:`tolerance`).
"""

from __future__ import annotations

import difflib
import enum
import functools
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from diopi.env import ConfigError

__all__ = ["TensorComparison", "Verdict", "all_passed", "check_tolerance_env", "compare_outputs", "compare_tensors",
           "tolerance", "worst_verdict"]

ENV_PREFIX = "AUTOCOMPARE_ERROR_TOLERANCE"

# torch.testing.assert_close defaults; float8 ones are ours (about one unit in the last place).
_DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-5, 1e-3),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-7, 1e-7),
}
for _name, _rtol in (("float8_e4m3fn", 0.125), ("float8_e4m3fnuz", 0.125), ("float8_e5m2", 0.25),
                     ("float8_e5m2fnuz", 0.25)):
    if hasattr(torch, _name):
        _DEFAULT_TOLERANCES[getattr(torch, _name)] = (1e-5, _rtol)


class Verdict(str, enum.Enum):
    """The outcome of one comparison."""

    PASS = "PASS"
    PASS_NOISE = "PASS (noise)"
    FAIL = "FAIL"


_SEVERITY = {None: 0, Verdict.PASS: 1, Verdict.PASS_NOISE: 2, Verdict.FAIL: 3}


def worst_verdict(verdicts: Iterable[Verdict | None]) -> Verdict | None:
    """The worst of ``verdicts``: FAIL over PASS (noise) over PASS; None when there are none (None entries: no
    verdict, ranked below PASS)."""
    return max(verdicts, key=_SEVERITY.__getitem__, default=None)


@dataclass(frozen=True)
class TensorComparison:
    """The comparison of one output leaf (a tensor or a plain value) at ``path``."""

    path: str
    verdict: Verdict
    max_abs_error: float
    max_rel_error: float
    cosine_similarity: float
    mismatch_ratio: float
    atol: float
    rtol: float
    error_vs_fp64: float | None
    cpu_error_vs_fp64: float | None
    message: str


def _is_exact(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def env_name(dtype: torch.dtype, op: str | None = None) -> str:
    """The environment variable overriding the tolerance of ``dtype`` (and ``op``, when given)."""
    name = f"{ENV_PREFIX}_{str(dtype).removeprefix('torch.').upper()}"
    return f"{name}_{re.sub(r'[^0-9A-Za-z]', '_', op).upper()}" if op else name


def op_env_names(dtype: torch.dtype, op: str) -> list[str]:
    """The per-op form ``<OPNAME>_AUTOCOMPARE_ERROR_TOLERANCE_<DTYPE>``: the whole op name first
    (``TORCH_NN_FUNCTIONAL_LINEAR_...``), then its last part (``LINEAR_...``)."""
    suffix = env_name(dtype)
    full = re.sub(r"[^0-9A-Za-z]", "_", op).upper()
    short = re.sub(r"[^0-9A-Za-z]", "_", op.rsplit(".", 1)[-1]).upper().strip("_")
    return list(dict.fromkeys(f"{name}_{suffix}" for name in (full, short) if name))


@functools.lru_cache(maxsize=4096)
def _tolerance_names(dtype: torch.dtype, op: str | None) -> tuple[str, ...]:
    """The variables :func:`tolerance` reads, most specific first (names only: values are read each time)."""
    names = [*op_env_names(dtype, op), env_name(dtype, op)] if op else []
    return (*names, env_name(dtype), ENV_PREFIX)


def _parse_env(name: str, env: Mapping[str, str] | None = None) -> tuple[float, float] | None:
    value = (os.environ if env is None else env).get(name)
    if value is None or not value.strip():
        return None
    parts = value.split(",")
    try:
        atol, rtol = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        atol = rtol = math.nan
    if not (math.isfinite(atol) and math.isfinite(rtol) and atol >= 0 and rtol >= 0):
        raise ConfigError(f"{name}={value!r}: expected 'atol,rtol', two non-negative finite numbers (e.g. 1e-5,1e-3)")
    return atol, rtol


_TOLERANCE_VARIABLE = re.compile(rf"(?:(?P<op>\w+?)_)?{ENV_PREFIX}(?:_(?P<rest>\w+))?")


def check_tolerance_env(env: Mapping[str, str] | None = None) -> None:
    """Check every tolerance variable set (``AUTOCOMPARE_ERROR_TOLERANCE``, ``..._<DTYPE>``, ``..._<DTYPE>_<OP>``,
    ``<OP>_..._<DTYPE>``) once, when a checking tool starts: a value that is not ``atol,rtol`` or a ``<DTYPE>``
    that names no floating dtype raises :class:`~diopi.env.ConfigError` naming the variable, so no check is
    turned into a skip later."""
    env = os.environ if env is None else env
    dtypes = sorted((str(d).removeprefix("torch.").upper() for d in _DEFAULT_TOLERANCES), key=len, reverse=True)
    for name in sorted(env):
        found = _TOLERANCE_VARIABLE.fullmatch(name)
        if found is None:
            continue
        rest = found["rest"] or ""
        if (found["op"] or rest) and not any(rest == d or rest.startswith(d + "_") for d in dtypes):
            near = difflib.get_close_matches(rest.split("_")[0], dtypes, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(f"{name}: {rest.split('_')[0] or 'nothing'!r} after {ENV_PREFIX}_ is not a floating "
                              f"dtype{hint}; expected one of {', '.join(sorted(dtypes))}")
        _parse_env(name, env)


def tolerance(dtype: torch.dtype, op: str | None = None) -> tuple[float, float]:
    """``(atol, rtol)`` for ``dtype``, optionally for one op.

    Lookup order: ``<OP>_AUTOCOMPARE_ERROR_TOLERANCE_<DTYPE>`` (the issue's form; the whole op name, then
    its last part, e.g. ``LINEAR_AUTOCOMPARE_ERROR_TOLERANCE_BFLOAT16``),
    ``AUTOCOMPARE_ERROR_TOLERANCE_<DTYPE>_<OP>`` (op upper-cased, non-alphanumerics as ``_``),
    ``AUTOCOMPARE_ERROR_TOLERANCE_<DTYPE>``, ``AUTOCOMPARE_ERROR_TOLERANCE`` (any floating dtype), then the
    ``torch.testing.assert_close`` default. Integer and bool dtypes are always exact.
    Each value is ``"atol,rtol"``; a malformed one raises :class:`ValueError` naming the variable.
    """
    if _is_exact(dtype):
        return 0.0, 0.0
    for name in _tolerance_names(dtype, op):
        found = _parse_env(name)
        if found is not None:
            return found
    return _DEFAULT_TOLERANCES.get(dtype, _DEFAULT_TOLERANCES[torch.float32])


def _fail(path: str, message: str, atol: float = 0.0, rtol: float = 0.0, abs_error: float = math.inf,
          rel_error: float = math.inf) -> TensorComparison:
    """A FAIL decided before any value is measured (structure, type, dtype or shape), or a plain value."""
    return TensorComparison(path=path, verdict=Verdict.FAIL, max_abs_error=abs_error, max_rel_error=rel_error,
                            cosine_similarity=math.nan, mismatch_ratio=1.0, atol=atol, rtol=rtol, error_vs_fp64=None,
                            cpu_error_vs_fp64=None, message=f"FAIL {path}: {message}")


def _equal(path: str, message: str, atol: float = 0.0, rtol: float = 0.0) -> TensorComparison:
    """A PASS with no error at all: equal values, or nothing to compare."""
    return TensorComparison(path=path, verdict=Verdict.PASS, max_abs_error=0.0, max_rel_error=0.0,
                            cosine_similarity=1.0, mismatch_ratio=0.0, atol=atol, rtol=rtol, error_vs_fp64=None,
                            cpu_error_vs_fp64=None, message=f"PASS {path}: {message}")


def _as_plain(t: torch.Tensor) -> torch.Tensor:
    """A dense, strided, CPU, real-valued view of ``t``'s values (a copy when needed; ``t`` is untouched)."""
    t = t.detach()
    if t.is_quantized:
        t = t.dequantize()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.cpu().resolve_conj().resolve_neg()
    if t.dtype == torch.complex32:
        t = t.to(torch.complex64)
    return torch.view_as_real(t) if t.is_complex() else t


def _index(flat: int, shape: torch.Size, complex_: bool) -> str:
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()
    if complex_:
        return f"{idx[:-1]}.{'imag' if idx[-1] else 'real'}"
    return str(idx)


def _max(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else 0.0


def _cosine(a: torch.Tensor, e: torch.Tensor) -> float:
    scale = max(_max(a.abs()), _max(e.abs()))
    if scale == 0.0:
        return 1.0
    a, e = a / scale, e / scale
    na, ne = float(a.norm()), float(e.norm())
    if na == 0.0 or ne == 0.0:
        return 0.0
    return max(-1.0, min(1.0, float((a * e).sum()) / (na * ne)))


@dataclass
class _Metrics:
    """Step 1 of a comparison (:func:`_measure`): what was measured on one pair of tensors, with the float64
    views that :func:`_judge` (step 2, the verdict) and :func:`_describe` (step 3, the message) read."""

    a: torch.Tensor  # actual, float64
    e: torch.Tensor  # expected, float64
    e_fin: torch.Tensor  # expected with non-finite elements (of either side) as 0
    finite: torch.Tensor
    special_ok: torch.Tensor  # NaN against NaN, or the same infinity
    diff: torch.Tensor
    rel: torch.Tensor
    mismatches: torch.Tensor
    n_bad: int
    max_abs: float
    max_rel: float
    cosine: float
    ratio: float
    err64: float | None
    cpu_err64: float | None

    @functools.cached_property
    def special_bad(self) -> torch.Tensor:
        """Elements where NaN/Inf placement differs."""
        return ~self.finite & ~self.special_ok


def _measure(a_raw: torch.Tensor, e_raw: torch.Tensor, reference: torch.Tensor | None, exact: bool, atol: float,
             rtol: float) -> _Metrics:
    """Step 1: the metrics of plain views ``a_raw`` (actual) against ``e_raw`` (expected) and, when given, the
    errors of both against the float64 ``reference``."""
    a, e = a_raw.to(torch.float64), e_raw.to(torch.float64)
    finite = a.isfinite() & e.isfinite()
    special_ok = (a.isnan() & e.isnan()) | (~finite & (a == e))
    diff = torch.where(finite, (a - e).abs(), 0.0)
    bound = atol + rtol * e.abs()
    # Integers compare in their own dtype: int64 beyond 2**53 would round in float64.
    close = a_raw == e_raw if exact else torch.where(finite, diff <= bound, special_ok)
    mismatches = ~close
    n_bad = int(mismatches.sum())
    ea = torch.where(finite, e.abs(), 1.0)
    rel = torch.where(diff == 0, 0.0, diff / ea)
    a_fin, e_fin = torch.where(finite, a, 0.0), torch.where(finite, e, 0.0)

    err64 = cpu_err64 = None
    if reference is not None:
        r = _as_plain(reference).to(torch.float64)
        ok = finite & r.isfinite()
        err64 = _max(torch.where(ok, (a - r).abs(), 0.0))
        cpu_err64 = _max(torch.where(ok, (e - r).abs(), 0.0))
    return _Metrics(a=a, e=e, e_fin=e_fin, finite=finite, special_ok=special_ok, diff=diff, rel=rel,
                    mismatches=mismatches, n_bad=n_bad, max_abs=_max(diff), max_rel=_max(rel),
                    cosine=_cosine(a_fin, e_fin), ratio=n_bad / a.numel(), err64=err64, cpu_err64=cpu_err64)


_Rule = Literal["within", "nan_inf", "noise", "outside"]


def _judge(m: _Metrics, noise_factor: float) -> tuple[Verdict, _Rule]:
    """Step 2: the verdict, and the rule that decided it (every element within the tolerance, NaN/Inf placement
    differs, outside the tolerance but noise against float64, outside the tolerance)."""
    if m.n_bad == 0:
        return Verdict.PASS, "within"
    if m.special_bad.any():
        return Verdict.FAIL, "nan_inf"
    if m.err64 is not None and m.cpu_err64 is not None:
        # A tiny slack, relative to the values: when the CPU is exact against float64, the device must be too.
        eps = max(torch.finfo(torch.float64).eps * _max(m.e_fin.abs()), torch.finfo(torch.float64).tiny)
        if m.err64 <= noise_factor * m.cpu_err64 + eps:
            return Verdict.PASS_NOISE, "noise"
    return Verdict.FAIL, "outside"


def _describe(m: _Metrics, rule: _Rule, atol: float, rtol: float, noise_factor: float, complex_: bool) -> str:
    """Step 3: the message for the rule :func:`_judge` applied (without the verdict and path prefix)."""
    summary = f"max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}, cosine {m.cosine:.6f}"
    shape, numel = m.a.shape, m.a.numel()
    if rule == "within":
        return summary
    if rule == "nan_inf":
        i = int(m.special_bad.flatten().nonzero()[0])
        return (f"NaN/Inf placement differs at {int(m.special_bad.sum())} element(s), first at index "
                f"{_index(i, shape, complex_)}: actual {float(m.a.flatten()[i])}, expected {float(m.e.flatten()[i])}")
    if rule == "noise":
        return (f"{m.n_bad}/{numel} outside atol={atol:g}, rtol={rtol:g} but error vs float64 {m.err64:.3g} <= "
                f"{noise_factor:g} x CPU's {m.cpu_err64:.3g}; {summary}")
    i = int(torch.where(m.mismatches, m.diff, -1.0).flatten().argmax())
    a_i, e_i = float(m.a.flatten()[i]), float(m.e.flatten()[i])
    vs64 = (f"; error vs float64 {m.err64:.3g} > {noise_factor:g} x CPU's {m.cpu_err64:.3g}"
            if m.err64 is not None else "")
    return (f"{m.n_bad}/{numel} elements ({100 * m.ratio:.1f}%) outside atol={atol:g}, rtol={rtol:g}; worst at "
            f"index {_index(i, shape, complex_)}: actual {a_i:.6g} vs expected {e_i:.6g} (abs {abs(a_i - e_i):.3g}, "
            f"rel {float(m.rel.flatten()[i]):.3g}){vs64}")


def compare_tensors(actual: Any, expected: Any, *, expected_fp64: torch.Tensor | None = None, op: str | None = None,
                    atol: float | None = None, rtol: float | None = None, noise_factor: float = 2.0,
                    path: str = "out") -> TensorComparison:
    """Compare one device tensor with its CPU reference (and optionally a float64 reference).

    ``actual`` may live on any device; no input is modified. Shape, dtype or type mismatches are
    FAIL results, never exceptions. ``atol``/``rtol`` default to :func:`tolerance`.
    """
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return _fail(path, f"expected {type(expected).__name__}, got {type(actual).__name__}")
    if actual.dtype != expected.dtype:
        return _fail(path, f"dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    if actual.shape != expected.shape:
        return _fail(path, f"shape mismatch: actual {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.is_meta or expected.is_meta:
        return _fail(path, "a meta tensor has no values to compare")
    exact = _is_exact(expected.dtype)
    default_atol, default_rtol = tolerance(expected.dtype, op)
    atol = 0.0 if exact else (default_atol if atol is None else float(atol))
    rtol = 0.0 if exact else (default_rtol if rtol is None else float(rtol))
    if expected.numel() == 0:
        return _equal(path, f"empty tensor of shape {tuple(expected.shape)}", atol, rtol)

    a_raw, e_raw = _as_plain(actual), _as_plain(expected)
    if torch.equal(a_raw, e_raw):  # the common case, decided in one pass (NaN never equals, so it goes on)
        return _equal(path, "bitwise equal", atol, rtol)
    reference = expected_fp64 if (isinstance(expected_fp64, torch.Tensor) and expected_fp64.shape == expected.shape
                                  and not exact) else None
    m = _measure(a_raw, e_raw, reference, exact, atol, rtol)
    verdict, rule = _judge(m, noise_factor)
    message = _describe(m, rule, atol, rtol, noise_factor, expected.is_complex())
    return TensorComparison(path=path, verdict=verdict, max_abs_error=m.max_abs, max_rel_error=m.max_rel,
                            cosine_similarity=m.cosine, mismatch_ratio=m.ratio, atol=atol, rtol=rtol,
                            error_vs_fp64=m.err64, cpu_error_vs_fp64=m.cpu_err64,
                            message=f"{verdict.value} {path}: {message}")


def _field_names(x: Any) -> tuple[str, ...] | None:
    """Field names of a namedtuple or a ``torch.return_types`` structseq, else None."""
    if isinstance(x, tuple):
        names = getattr(x, "_fields", None) or getattr(type(x), "__match_args__", None)
        if names and len(names) == len(x):
            return tuple(names)
    return None


def _compare_leaf(actual: Any, expected: Any, expected_fp64: Any, path: str, op: str | None, atol: float | None,
                  rtol: float | None, noise_factor: float) -> TensorComparison:
    if type(actual) is not type(expected):
        return _fail(path, f"expected {type(expected).__name__} {expected!r}, got {type(actual).__name__} {actual!r}")
    if isinstance(expected, (float, complex)):  # Python scalars: the tolerance of the default dtype
        dtype = torch.get_default_dtype() if isinstance(expected, float) else torch.complex64
        ref = torch.tensor(expected_fp64, dtype=torch.float64 if isinstance(expected, float) else torch.complex128) \
            if isinstance(expected_fp64, (int, float, complex)) and not isinstance(expected_fp64, bool) else None
        a_atol, a_rtol = tolerance(dtype, op)
        atol, rtol = (a_atol if atol is None else atol), (a_rtol if rtol is None else rtol)
        t = torch.complex128 if isinstance(expected, complex) else torch.float64
        return compare_tensors(torch.tensor(actual, dtype=t), torch.tensor(expected, dtype=t), expected_fp64=ref,
                               atol=atol, rtol=rtol, noise_factor=noise_factor, path=path)
    try:
        equal = bool(actual == expected)
    except Exception as exc:  # an uncomparable leaf is a finding, not a crash
        return _fail(path, f"cannot compare {type(expected).__name__} values: {exc}")
    if not equal:
        error = math.inf
        if isinstance(expected, int) and not isinstance(expected, bool):
            error = float(abs(actual - expected))
        return _fail(path, f"actual {actual!r} != expected {expected!r}", abs_error=error,
                     rel_error=error / abs(expected) if error != math.inf and expected else math.inf)
    return _equal(path, repr(expected))


def compare_outputs(actual: Any, expected: Any, *, expected_fp64: Any = None, op: str | None = None,
                    atol: float | None = None, rtol: float | None = None,
                    noise_factor: float = 2.0) -> list[TensorComparison]:
    """Compare nested outputs leaf by leaf; one :class:`TensorComparison` per leaf or structure mismatch.

    Tuples, lists, dicts, namedtuples and ``torch.return_types`` are walked in parallel (paths like
    ``out[1]``, ``out.values``, ``out['key']``); tensors go to :func:`compare_tensors`, Python floats
    use the tolerance, other leaves compare by equality. Mismatches are FAIL entries, never exceptions.
    """
    results: list[TensorComparison] = []

    def walk(a: Any, e: Any, r: Any, path: str) -> None:
        if isinstance(a, torch.Tensor) or isinstance(e, torch.Tensor):
            results.append(compare_tensors(a, e, expected_fp64=r if isinstance(r, torch.Tensor) else None, op=op,
                                           atol=atol, rtol=rtol, noise_factor=noise_factor, path=path))
        elif isinstance(e, (tuple, list)) and not isinstance(e, torch.Size):
            if type(a) is not type(e):
                results.append(_fail(path, f"expected {type(e).__name__}, got {type(a).__name__}"))
            elif len(a) != len(e):
                results.append(_fail(path, f"length mismatch: actual {len(a)}, expected {len(e)}"))
            else:
                names = _field_names(e)
                refs = list(r) if isinstance(r, (tuple, list)) and len(r) == len(e) else [None] * len(e)
                for i, (ai, ei, ri) in enumerate(zip(a, e, refs, strict=True)):
                    walk(ai, ei, ri, f"{path}.{names[i]}" if names else f"{path}[{i}]")
        elif isinstance(e, dict):
            if not isinstance(a, dict):
                results.append(_fail(path, f"expected {type(e).__name__}, got {type(a).__name__}"))
                return
            missing, extra = [k for k in e if k not in a], [k for k in a if k not in e]
            if missing or extra:
                results.append(_fail(path, f"keys differ: missing {missing}, unexpected {extra}"))
            for k in e:
                if k in a:
                    walk(a[k], e[k], r.get(k) if isinstance(r, dict) else None, f"{path}[{k!r}]")
        else:
            results.append(_compare_leaf(a, e, r, path, op, atol, rtol, noise_factor))

    walk(actual, expected, expected_fp64, "out")
    return results


def all_passed(results: list[TensorComparison]) -> bool:
    """True when no result is a FAIL (``PASS (noise)`` counts as passed)."""
    return all(r.verdict is not Verdict.FAIL for r in results)
