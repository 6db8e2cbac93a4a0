"""A test-only stand-in for Huawei's torch_npu: registers a pure-Python ``npu`` device (see ../../_common)."""

import importlib.util
import sys
from pathlib import Path

__version__ = "2.1.0.fake"

_spec = importlib.util.spec_from_file_location("_fake_vendor", Path(__file__).parents[2] / "_common" / "fake_vendor.py")
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
npu = _fake.register(sys.modules[__name__], "npu", "Fake Ascend 910B", 2, "hccl")
