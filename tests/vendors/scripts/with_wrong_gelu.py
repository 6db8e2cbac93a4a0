"""Run a script with a wrong GELU kernel put over the plugin's own for the PrivateUse1 key (tests/vendors/
wrong_kernel.py), as a defective vendor kernel would be: ``python with_wrong_gelu.py script.py args...``."""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/vendors: wrong_kernel
import torch  # noqa: E402
from wrong_kernel import biased_gelu  # noqa: E402

_library = torch.library.Library("aten", "IMPL")
_library.impl("gelu", biased_gelu, "PrivateUse1")
script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path[0] = str(Path(script).resolve().parent)
runpy.run_path(script, run_name="__main__")
