"""A test-only stand-in for Cambricon's torch_mlu: registers a pure-Python ``mlu`` device (see ../../_common)."""

import importlib.util
import sys
from pathlib import Path

__version__ = "1.17.0.fake"

_spec = importlib.util.spec_from_file_location("_fake_vendor", Path(__file__).parents[2] / "_common" / "fake_vendor.py")
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
mlu = _fake.register(sys.modules[__name__], "mlu", "Fake Cambricon MLU370", 3, "cncl")
