"""``gen``: compute every case's reference on the CPU and store it as ``<data dir>/<function>/<nnnn>/``.

A case directory is in the case format (:mod:`diopi.case_format`): ``case.json`` and ``tensors.safetensors``.
Its record carries the inputs (``i*``), the expected outputs in the case dtype (``o*``), for floating dtypes
below float64 a float64 reference (``reference_outputs``, ``r*``: the same kernel on the inputs upcast to
float64) and a ``conformance`` section: case id, function, dtype, layout, input shapes, params, the arguments the
call writes with their expected values after the call (``w*``), the config's tolerance and, for a random
function, its :class:`~diopi.conformance.spec.Stats` (random cases store no expected values).
"""

from __future__ import annotations

import importlib
import shutil
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

import diopi
from diopi import case_format as cf
from diopi.conformance.cases import CaseSpec, ConfigError, bind, build_call, build_inputs, resolve_op
from diopi.conformance.recording import RecordedCall, clone_args, record, record_backward
from diopi.conformance.spec import Config
from diopi.impl import written_arguments as schema_written_arguments
from diopi.tensor_walk import map_leaves

TOOL = "conformance"
#: Written into a data folder made from captures (``ditorch conformance from-capture``): ``run`` then takes every
#: stored case of a function instead of the cases its config expands to.
FROM_CAPTURE_INDEX = "from_capture.json"
_BELOW_FP64 = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class GenResult:
    """What ``gen`` did for one function: cases written, and errors (case or recipe id, message)."""

    function: str
    written: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)


def case_dir(data_dir: Path, case_id: str) -> Path:
    """``<data dir>/<function>/<nnnn>`` for case id ``<function>/<nnnn>``."""
    return Path(data_dir) / case_id


def written_arguments(op: torch._ops.OpOverload, args: list[Any], kwargs: dict[str, Any]) -> list[tuple[Any, Any]]:
    """``[(location, value)]`` of the arguments ``op`` writes and the call passed (``location``: ``["args", i]``
    or ``["kwargs", name]``), by its schema's alias annotations (:func:`diopi.impl.written_arguments`)."""
    positions, names = schema_written_arguments(op)
    found: list[tuple[Any, Any]] = [(["args", i], args[i]) for i in positions if i < len(args) and args[i] is not None]
    found += [(["kwargs", n], kwargs[n]) for n in names if kwargs.get(n) is not None]
    return found


def _upcast(value: Any) -> Any:
    return map_leaves(value, lambda x: x.to(torch.float64) if isinstance(x, torch.Tensor) and x.dtype in _BELOW_FP64
                      else x)


def _float64_reference(fn: diopi.DiopiFunction, op: torch._ops.OpOverload, args: list[Any],
                       kwargs: dict[str, Any]) -> Any:
    """The kernel on the inputs upcast to float64, or None where it cannot run so."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn.reference(op, *_upcast(args), **_upcast(kwargs))
    except Exception:  # an operator without a float64 kernel: the verdict goes without the noise rule
        return None


class ReferenceFailed(RuntimeError):
    """The CPU reference refused a case: its config needs fixing."""


def stats_record(config: Config) -> dict[str, Any] | None:
    """The config's :class:`~diopi.conformance.spec.Stats`, encoded (infinite bounds included)."""
    if config.stats is None:
        return None
    enc = cf.Encoder("s", with_data=False)
    return {k: enc.encode(v) for k, v in asdict(config.stats).items()}


def write_case(target: Path, case_id: str, spec: CaseSpec, op: torch._ops.OpOverload, args: list[Any],
               kwargs: dict[str, Any]) -> None:
    """Run the reference of ``op`` on ``args``/``kwargs`` (host tensors, consumed) and store the case."""
    fn = diopi.get_function(spec.function)
    case = cf.CaseBuilder()
    case.encode_call(args, kwargs)
    pristine = (clone_args(list(args)), clone_args(dict(kwargs)))
    random = fn.is_random
    torch.manual_seed(spec.call_seed)
    try:
        with warnings.catch_warnings():  # deprecation notes of the reference's operators are not the user's concern
            warnings.simplefilter("ignore")
            output = fn.reference(op, *args, **kwargs)
    except Exception as exc:
        raise ReferenceFailed(f"the CPU reference raised {type(exc).__name__}: {exc}") from exc
    shapes = [m["shape"] for m in case.encoder("i").meta.values()]
    outputs = reference = None
    written: list[list[Any]] = []
    if not random:
        outputs = case.encode("o", output)
        written = [[loc, case.encode("w", value)] for loc, value in written_arguments(op, args, kwargs)]
        if spec.dtype in _BELOW_FP64:
            ref = _float64_reference(fn, op, *pristine)
            if ref is not None:
                reference = case.encode("r", ref)
    params_enc = cf.Encoder("p", with_data=False)
    record = case.record(
        tool=TOOL, op=str(op), call_id=int(case_id.rsplit("/", 1)[1]), step=0, rank=0, call_site=None, device="cpu",
        inplace=bool(written) or spec.inplace, random=random, mode="data", outputs=outputs,
        reference_outputs=reference)
    record["conformance"] = {
        "id": case_id, "function": spec.function, "family": fn.family, "dtype": cf.dtype_name(spec.dtype),
        "layout": spec.layout, "mode": spec.mode, "seed": spec.call_seed,
        "shapes": shapes,
        "params": {k: params_enc.encode(v) for k, v in spec.params if not isinstance(v, torch.Tensor)},
        "written": written,
        "tolerance": {cf.dtype_name(d): list(t) for d, t in spec.own_config.tolerance.items()},
        "stats": stats_record(spec.own_config) if random else None,
    }
    cf.write_case(target, record, case.data)


def resolve_call(config: Config) -> Callable[..., Any]:
    """The callable a ``call`` config names (``"package.module.function"``)."""
    module, _, attr = (config.call or "").rpartition(".")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def run_recipe(spec: CaseSpec) -> list[RecordedCall]:
    """The calls of ``spec.function`` a recipe makes on the CPU."""
    config = spec.config
    inputs = build_inputs(spec)
    params = {k: v for k, v in spec.params if not k.endswith("=None")}
    if config.op:
        op = resolve_op(config.op)

        def forward() -> Any:
            args, kwargs = bind(op, {**inputs, **params}, config.function)
            return op(*args, **kwargs)
    else:
        target = resolve_call(config)

        def forward() -> Any:
            return target(**inputs, **params)
    if spec.mode == "call":
        torch.manual_seed(spec.call_seed)
        return record(spec.function, forward)
    for name, inp in config.inputs.items():
        value = inputs.get(name)
        for t in value if isinstance(value, list) else [value]:
            if inp.grad and isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                t.requires_grad_(True)
    torch.manual_seed(spec.call_seed)
    return record_backward(spec.function, forward, torch.Generator().manual_seed(spec.call_seed + 1))


def gen_function(data_dir: Path, function: str, cases: list[CaseSpec], recipes: list[CaseSpec],
                 on_case: Callable[[], None] | None = None) -> GenResult:
    """Store every case of one function; recorded cases of its recipes follow its op cases in numbering."""
    result = GenResult(function)
    root = Path(data_dir) / function
    if root.exists():  # a function is always written whole: stale cases of an older config must not linger
        shutil.rmtree(root)
    for spec in cases:
        try:
            op, args, kwargs = build_call(spec)
            write_case(case_dir(data_dir, spec.id), spec.id, spec, op, args, kwargs)
            result.written += 1
        except (ConfigError, ReferenceFailed) as exc:  # a config to fix
            result.errors.append((spec.id, str(exc)))
        except Exception as exc:
            result.errors.append((spec.id, f"the case could not be built or stored: {type(exc).__name__}: {exc}"))
        if on_case:
            on_case()
    number = len(cases)
    for spec in recipes:
        try:
            calls = run_recipe(spec)
            if not calls:
                raise ConfigError(f"running it made no call of {function}")
            for call in calls:
                case_id = f"{function}/{number:04d}"
                write_case(case_dir(data_dir, case_id), case_id, spec, call.op, call.args, call.kwargs)
                number += 1
                result.written += 1
        except (ConfigError, ReferenceFailed) as exc:
            result.errors.append((spec.id, str(exc)))
        except Exception as exc:
            result.errors.append((spec.id, f"recording raised {type(exc).__name__}: {exc}"))
        if on_case:
            on_case()
    return result
