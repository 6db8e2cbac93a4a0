"""droplet's DIOPI implementation: the reference kernels with droplet's traits (lower-precision matmul,
unsupported dtypes) and injected faults. torch_dipu's droplet runtime and ``--impl droplet`` both run these."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from diopi.env import ConfigError
from diopi.impl.droplet.faults import Fault, inject, op_names, parse_faults
from diopi.impl.droplet.traits import DropletTraits, faults_from_env, parse_dtypes, parse_size
from diopi.impls import UnsupportedDtypeError
from diopi.registry import DiopiFunction, Kernel

__all__ = ["DropletImpl"]


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """Round float32 to TF32 (10 mantissa bits), as a tensor core does with its inputs."""
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0x1000) & ~0x1FFF
    return rounded.view(torch.float32).view(t.shape)


def _lower_precision(kernel: Kernel, precision: str) -> Kernel:
    to_low = _round_tf32 if precision == "high" else (lambda t: t.to(torch.bfloat16).to(torch.float32))

    def matmul(op: Any, *args: Any, **kwargs: Any) -> Any:
        args = tuple(to_low(a) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args)
        return kernel(op, *args, **kwargs)

    return matmul


def _dtype_checked(kernel: Kernel, unsupported: frozenset[torch.dtype], op_name: str) -> Kernel:
    def check(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            # 0-dim tensors may be host scalars (``x + torch.tensor(1.0, dtype=torch.float64)``), which
            # a device takes as a number.
            if value.dtype in unsupported and value.dim():
                raise UnsupportedDtypeError(
                    f"droplet: aten.{op_name} does not support {value.dtype} on this device "
                    f"(DROPLET_UNSUPPORTED_DTYPES); cast to a supported dtype or, on dipu, add the operator to "
                    f"DIPU_FORCE_FALLBACK_OPS_LIST"
                )
        elif isinstance(value, torch.dtype):
            if value in unsupported:
                raise UnsupportedDtypeError(
                    f"droplet: aten.{op_name} cannot produce {value}: unsupported on this device"
                )
        elif isinstance(value, (list, tuple)):
            for v in value:
                check(v)

    def checked(op: Any, *args: Any, **kwargs: Any) -> Any:
        check(args)
        check(tuple(kwargs.values()))
        return kernel(op, *args, **kwargs)

    return checked


@dataclass(frozen=True)
class DropletImpl:
    """The droplet implementation: :attr:`DiopiFunction.reference` kernels, changed by ``traits`` and
    ``faults``. :meth:`from_env` reads the ``DROPLET_*`` switches; :meth:`replace` overrides them."""

    name: ClassVar[str] = "droplet"
    #: droplet ships no adaptor config: its kernels take every dtype and layout the reference takes.
    adaptor_config: ClassVar[None] = None

    traits: DropletTraits = field(default_factory=DropletTraits)
    faults: tuple[Fault, ...] = ()

    @classmethod
    def from_env(cls) -> DropletImpl:
        """droplet as ``DROPLET_UNSUPPORTED_DTYPES``, ``DROPLET_MATMUL_PRECISION``, ``DROPLET_FAULTS`` (and the
        device switches torch_dipu uses) describe it."""
        return cls(DropletTraits.from_env(), tuple(faults_from_env()))

    def replace(self, **changes: Any) -> DropletImpl:
        """A copy with switches changed: ``faults`` (``DROPLET_FAULTS`` text or Fault list), ``unsupported_dtypes``
        (dtypes or names), ``matmul_precision``, ``memory_capacity`` (bytes or ``"16GiB"``), ``device_count``.
        An unknown or invalid switch raises ValueError and changes nothing."""
        faults = changes.pop("faults", None)
        new_faults = self.faults if faults is None else tuple(
            parse_faults(faults, "droplet faults") if isinstance(faults, str) else faults
        )
        switches = {f.name for f in dataclasses.fields(self.traits)}
        for key in changes:
            if key not in switches:
                raise ConfigError(f"droplet has no switch {key!r} (switches: faults, {', '.join(sorted(switches))})")
        if "unsupported_dtypes" in changes:
            changes["unsupported_dtypes"] = parse_dtypes(changes["unsupported_dtypes"], "droplet unsupported_dtypes")
        if isinstance(changes.get("memory_capacity"), str):
            changes["memory_capacity"] = parse_size(changes["memory_capacity"], "droplet memory_capacity")
        new_traits = dataclasses.replace(self.traits, **changes)
        new_traits.validate()
        return DropletImpl(new_traits, new_faults)

    def kernel(self, fn: DiopiFunction, op: torch._ops.OpOverload) -> Kernel | None:
        """The reference kernel of ``fn``, in lower precision for a ``matmul`` function when asked, with every
        fault whose pattern names ``op`` or ``fn`` injected, behind the unsupported-dtype check."""
        kernel: Kernel = fn.reference
        if "matmul" in fn.tags and self.traits.matmul_precision != "highest":
            kernel = _lower_precision(kernel, self.traits.matmul_precision)
        for fault in self.faults:
            if fault.matches(fn, op):
                kernel = inject(kernel, fault, op, backward_function="backward" in fn.tags)
        if self.traits.unsupported_dtypes:
            kernel = _dtype_checked(kernel, self.traits.unsupported_dtypes, op_names(op)[0])
        return kernel
