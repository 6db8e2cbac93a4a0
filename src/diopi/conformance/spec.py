"""Declarative conformance case configs: what a family module in :mod:`diopi.conformance.configs` writes.

A :class:`Config` describes the cases of one DIOPI function. Cases are the product of its ``shapes``
(one entry per case group: a shape for each tensor input), ``dtypes`` and ``params`` (each non-tensor
argument with a list of values), plus layout variants (``layouts``) of the same inputs. The function is
reached in one of three ways:

* ``op``: the ATen overload itself (``"add.Tensor"``, ``"diopi::rms_norm.default"``), called with the tensor
  ``inputs`` and ``params`` bound by the schema's argument names; arguments not named take their defaults.
* ``call``: a torch-level callable (dotted name, ``"torch.nn.functional.layer_norm"``) called with the
  ``inputs`` and ``params`` as keywords; ``gen`` runs it on the CPU, records the calls of the operators this
  function serves, and stores each as a case. Use it where the operator's own arguments are awkward to
  write by hand (batch norm's running statistics, an embedding's indices).
* ``from_forward``: the name of a forward function whose configs are run forward and backward on the CPU;
  the calls of this (backward) function's operators are recorded with their real inputs (saved tensors,
  gradients) and stored as its cases.

A case stored by ``gen`` is always one operator call of this function, so a faulty kernel fails exactly
its own function's cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

#: Layout variants of the inputs: as created; non-contiguous (a strided view with the same values);
#: a view with a non-zero storage offset.
LAYOUTS = ("contiguous", "noncontiguous", "offset")

FLOAT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT = (torch.int64, torch.int32)
BOOL = (torch.bool,)


@dataclass(frozen=True)
class Values:
    """How input values are drawn. ``kind``: ``"normal"`` (standard normal, scaled into [low, high] when both
    are given), ``"uniform"`` in [low, high), ``"positive"`` (uniform in [low or 0.1, high or 4]),
    ``"integer"`` in [low, high), ``"bool"``, ``"special"`` (normal values with 0, -0, inf, -inf and NaN mixed
    in), ``"probability"`` (uniform in [0, 1]), ``"index"`` (integers in [0, high), for index arguments:
    ``high`` may be ``"dim:N"`` meaning the size of dimension N of the first input)."""

    kind: str = "normal"
    low: float | None = None
    high: float | str | None = None


@dataclass(frozen=True)
class Input:
    """A tensor input. ``dtype`` fixes its dtype (an index tensor is int64 whatever the case's dtype is);
    ``values`` overrides the config's value generator; ``grad`` marks it as differentiable when the config is
    run backward (``from_forward`` functions); an optional input is also tried as None with a params entry
    ``"<name>=None": [False, True]`` (True: the input is passed as None); ``list_of`` makes it a list of that
    many tensors (``cat``, ``_foreach_*``), each with the shape given for it."""

    dtype: torch.dtype | None = None
    values: Values | None = None
    grad: bool = True
    list_of: int = 0


@dataclass(frozen=True)
class Stats:
    """How a random function's results are judged, never by value. ``kind``: ``"moments"`` (sample mean and
    standard deviation near ``mean``/``std``, which may name a params entry: ``"param:mean"``), ``"range"``
    (every value in [low, high)), ``"bernoulli"`` (values 0/1, mean near p), ``"permutation"`` (a permutation
    of range(n)), ``"dropout"`` (kept values scaled by 1/(1-p), drop ratio near p), ``"categorical"``
    (indices in range, without replacement when asked). Every random case also checks seed reproducibility:
    the same seed gives the same result twice."""

    kind: str
    mean: float | str | None = None
    std: float | str | None = None
    low: float | str | None = None
    high: float | str | None = None


@dataclass(frozen=True)
class Config:
    """The cases of DIOPI function ``function``. ``tolerance`` maps a dtype to ``(atol, rtol)`` overriding
    :func:`diopi.compare.tolerance`; ``inplace`` names an in-place overload run on the same cases (its result
    is the written input); ``stats`` judges a random function; ``note`` says why a config looks unusual."""

    function: str
    op: str | None = None
    call: str | None = None
    from_forward: str | None = None
    inputs: dict[str, Input] = field(default_factory=dict)
    params: dict[str, list[Any]] = field(default_factory=dict)
    shapes: list[tuple[tuple[int, ...] | list[tuple[int, ...]], ...]] = field(default_factory=list)
    dtypes: tuple[torch.dtype, ...] = FLOAT
    layouts: tuple[str, ...] = LAYOUTS
    values: Values = Values()
    inplace: str | None = None
    tolerance: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    stats: Stats | None = None
    note: str = ""

    def __post_init__(self) -> None:
        ways = [w for w in (self.op, self.call, self.from_forward) if w]
        if len(ways) != 1:
            raise ValueError(f"conformance config {self.function}: give exactly one of op, call, from_forward")
        for layout in self.layouts:
            if layout not in LAYOUTS:
                raise ValueError(f"conformance config {self.function}: unknown layout {layout!r} "
                                 f"({', '.join(LAYOUTS)})")
        if not self.from_forward:
            for shape_group in self.shapes:
                if len(shape_group) != len(self.inputs):
                    raise ValueError(f"conformance config {self.function}: shapes entry {shape_group!r} has "
                                     f"{len(shape_group)} shapes for {len(self.inputs)} inputs {list(self.inputs)}")
