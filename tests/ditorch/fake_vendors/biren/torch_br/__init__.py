"""A test-only stand-in for Biren's torch_br: registers a pure-Python ``supa`` device (see ../../_common)."""

import importlib.util
import sys
from pathlib import Path

__version__ = "0.5.0.fake"

_spec = importlib.util.spec_from_file_location("_fake_vendor", Path(__file__).parents[2] / "_common" / "fake_vendor.py")
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
supa = _fake.register(sys.modules[__name__], "supa", "Fake Biren BR104", 3, "bccl")
