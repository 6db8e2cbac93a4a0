"""Random number generators of the dipu device: ``torch.Generator(device="dipu")`` and the default ones.

A dipu generator is a :class:`DipuGenerator`: PyTorch's generator object with its device reported as
``dipu:N``. A Python vendor's random kernels run on storage tensors, so the generator state underneath is
the host generator's (the same state format as ``torch.dipu.get_rng_state``). Each device has one default
generator (``torch.dipu.default_generators``), used by random operators called without ``generator=``.

PyTorch makes device generators through a C++ backend hook that a Python backend cannot provide, so
``torch.Generator(device="dipu")`` raises NotImplementedError there. The narrowest seam is the name
``torch.Generator`` itself: :func:`install` replaces it with a subclass whose constructor returns a
:class:`DipuGenerator` for dipu devices and PyTorch's own generator, unchanged, for every other device.
``isinstance(g, torch.Generator)`` stays true for every generator. Code that captured the class before
``import torch_dipu`` (or compares ``type(g) is torch.Generator``) keeps PyTorch's class.

A generator reaches a kernel through C++, which keeps the host generator underneath but not the Python
object, so a dipu operator cannot tell a dipu generator from a CPU one: unlike CUDA, a CPU generator
passed to a dipu random operator is used rather than rejected.
"""

from __future__ import annotations

from typing import Any

import torch

_BASE = torch._C.Generator


class DipuGenerator(_BASE):
    """A generator of one dipu device (``torch.Generator(device="dipu:1")``)."""

    def __new__(cls, device: Any = "dipu") -> DipuGenerator:
        from torch_dipu.state import get_state

        state = get_state()
        generator = _BASE.__new__(cls)
        generator._device = state.device(state.device_index(device))
        return generator

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._device

    def __repr__(self) -> str:
        return f"<torch_dipu.DipuGenerator object on {self._device}>"

    def __reduce__(self) -> tuple:
        # PyTorch's reduce names the C class and the host device; copies and pickles stay dipu generators.
        _, _, state = super().__reduce__()
        return DipuGenerator, (str(self._device),), state


class _GeneratorType(type(_BASE)):
    # Generators PyTorch makes itself (torch.default_generator, CPU and CUDA ones) stay instances.
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _BASE)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _BASE)


class Generator(_BASE, metaclass=_GeneratorType):
    """``torch.Generator(device=...)``: a :class:`DipuGenerator` for dipu devices, PyTorch's generator
    for every other device."""

    def __new__(cls, device: Any = "cpu") -> Any:
        if _is_dipu_device(device):
            return DipuGenerator(device)
        return _BASE(device)


Generator.__module__ = "torch"
Generator.__qualname__ = Generator.__name__ = "Generator"


def _is_dipu_device(device: Any) -> bool:
    """Whether ``device`` (a device, a string, or an index of the current accelerator) names a dipu device."""
    if isinstance(device, str):
        return device.split(":", 1)[0].strip() == "dipu"
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device(device)
    return isinstance(device, torch.device) and device.type == "dipu"


def install() -> None:
    """Make ``torch.Generator(device="dipu")`` work (idempotent)."""
    if torch.Generator is not Generator:
        torch.Generator = Generator
