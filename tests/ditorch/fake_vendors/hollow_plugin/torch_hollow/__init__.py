"""A test-only plugin that imports and registers its ``hollow`` device but reports no device (count 0), as a
plugin installed on a machine whose accelerator is missing would. Imported by name (no autoload entry point)."""

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_fake_vendor", Path(__file__).parents[2] / "_common" / "fake_vendor.py")
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
hollow = _fake.register(sys.modules[__name__], "hollow", "Hollow", 0, "hollowccl")
hollow.is_available = lambda: False
