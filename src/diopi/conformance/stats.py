"""Statistical checks of a random function's result (never by value), per :class:`~diopi.conformance.spec.Stats`.

Bounds are wide (about five standard errors of the estimate, plus a small absolute slack), so a correct sampler
passes all but astronomically rarely while a biased one (a shifted mean, a wrong drop ratio, a repeated index)
fails. Seed reproducibility is checked by the runner: the same seed must give the same result twice.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["check_random"]


def _resolve(value: Any, params: dict[str, Any]) -> float | None:
    """A number, or ``"param:<name>"`` read from the case's params."""
    if isinstance(value, str):
        if not value.startswith("param:"):
            raise ValueError(f"stats value {value!r}: expected a number or 'param:<name>'")
        name = value[6:]
        if name not in params:
            raise ValueError(f"stats value {value!r}: the case has no param {name!r} (params: {sorted(params)})")
        value = params[name]
    return None if value is None else float(value)


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for v in value:
            found = _first_tensor(v)
            if found is not None:
                return found
    return None


def _moments(x: torch.Tensor, mean: float | None, std: float | None) -> str | None:
    n = x.numel()
    if n == 0:
        return None
    if not bool(x.isfinite().all()):
        return "non-finite samples"
    m = float(x.mean())
    s = float(x.std()) if n > 1 else 0.0
    scale = std if std is not None else max(s, 1e-12)
    if mean is not None and abs(m - mean) > 5 * scale / math.sqrt(n) + 1e-2 * max(1.0, abs(mean)):
        return f"sample mean {m:.4g} is not near {mean:g} (n={n}, std {scale:.3g})"
    if std is not None and n > 8 and abs(s - std) > 5 * std / math.sqrt(2 * (n - 1)) + 2e-2 * std:
        return f"sample standard deviation {s:.4g} is not near {std:g} (n={n})"
    return None


def check_random(stats: dict[str, Any] | None, params: dict[str, Any], args: list[Any], result: Any) -> str | None:
    """None when ``result`` (host tensors) is a plausible sample, else a message saying what is wrong. ``args``
    are the call's host arguments (a bernoulli's probabilities, a dropout's input, multinomial's weights)."""
    out = _first_tensor(result)
    if out is None:
        return f"expected a tensor result, got {type(result).__name__}"
    if stats is None:
        return None
    kind = stats.get("kind")
    x = out.detach().cpu()
    xf = x.to(torch.float64)
    if kind == "moments":
        return _moments(xf, _resolve(stats.get("mean"), params), _resolve(stats.get("std"), params))
    if kind == "range":
        low, high = _resolve(stats.get("low"), params), _resolve(stats.get("high"), params)
        if low is not None and x.numel() and float(xf.min()) < low:
            return f"value {float(xf.min()):g} below the range low {low:g}"
        if high is not None and x.numel() and float(xf.max()) >= high:
            return f"value {float(xf.max()):g} at or above the range high {high:g}"
        return None
    if kind == "bernoulli":
        if x.numel() and not bool(((xf == 0) | (xf == 1)).all()):
            return "a bernoulli sample holds a value other than 0 and 1"
        p = _resolve(stats.get("mean"), params)
        if p is None:
            probs = _first_tensor(args)
            p = float(probs.to(torch.float64).mean()) if probs is not None and probs.numel() else None
        if p is None or not x.numel():
            return None
        tol = 5 * math.sqrt(max(p * (1 - p), 1e-12) / x.numel()) + 0.02
        m = float(xf.mean())
        return None if abs(m - p) <= tol else f"ratio of ones {m:.4g} is not near p={p:g} (n={x.numel()})"
    if kind == "permutation":
        n = x.numel()
        if not torch.equal(torch.sort(x.reshape(-1).to(torch.int64)).values, torch.arange(n)):
            return f"not a permutation of range({n})"
        return None
    if kind == "dropout":
        source = _first_tensor(args)
        p = _resolve(stats.get("mean"), params) if stats.get("mean") is not None else float(params.get("p", 0.5))
        mask = result[1] if isinstance(result, (tuple, list)) and len(result) > 1 else (x != 0)
        mask = mask.detach().cpu().bool()
        if source is not None and source.shape == x.shape and p < 1:
            expected = source.detach().cpu().to(torch.float64) / (1 - p)
            kept = torch.where(mask, xf, 0.0)
            want = torch.where(mask, expected, 0.0)
            if not torch.allclose(kept, want, rtol=1e-2, atol=1e-3):
                return f"kept values are not the input scaled by 1/(1-p) = {1 / (1 - p):g}"
            if bool((xf[~mask] != 0).any()):
                return "dropped values are not zero"
        if x.numel():
            drop = 1 - float(mask.to(torch.float64).mean())
            tol = 5 * math.sqrt(max(p * (1 - p), 1e-12) / x.numel()) + 0.02
            if abs(drop - p) > tol:
                return f"drop ratio {drop:.4g} is not near p={p:g} (n={x.numel()})"
        return None
    if kind == "categorical":
        weights = _first_tensor(args)
        if weights is None:
            return None
        w = weights.detach().cpu()
        n_cat = w.shape[-1]
        idx = x.to(torch.int64)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n_cat):
            return f"an index outside range({n_cat})"
        rows_w = w.reshape(-1, n_cat)
        rows_i = idx.reshape(rows_w.shape[0], -1) if idx.numel() else idx.reshape(rows_w.shape[0], 0)
        if rows_i.numel() and bool((torch.gather(rows_w, 1, rows_i) == 0).any()):
            return "a category of zero probability was drawn"
        if not params.get("replacement", False):
            for row in rows_i:
                if row.unique().numel() != row.numel():
                    return "an index drawn twice without replacement"
        return None
    raise ValueError(f"unknown stats kind {kind!r}")
