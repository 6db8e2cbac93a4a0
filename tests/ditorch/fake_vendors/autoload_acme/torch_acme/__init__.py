"""A test-only plugin with no ditorch adapter, loaded by PyTorch's backend autoload (its dist-info publishes a
``torch.backends`` entry point): registers a pure-Python ``acme`` device, 2 devices, collectives ``acmeccl``."""

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_fake_vendor", Path(__file__).parents[2] / "_common" / "fake_vendor.py")
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
acme = _fake.register(sys.modules[__name__], "acme", "Acme X1", 2, "acmeccl")


def _autoload() -> None:
    """The ``torch.backends`` entry point: importing this package registered the device already."""
