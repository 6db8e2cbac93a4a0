"""A test-only stand-in for Moore Threads's torch_musa: registers a pure-Python ``musa`` device (see ../../_common)."""

import importlib.util
import sys
from pathlib import Path

__version__ = "1.3.0.fake"

_spec = importlib.util.spec_from_file_location("_fake_vendor", Path(__file__).parents[2] / "_common" / "fake_vendor.py")
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
musa = _fake.register(sys.modules[__name__], "musa", "Fake MTT S4000", 3, "mccl")
