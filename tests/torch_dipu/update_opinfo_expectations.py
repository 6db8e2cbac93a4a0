"""Regenerate the OpInfo conformance expectations and the counts in docs/opinfo.md.

    python tests/torch_dipu/update_opinfo_expectations.py [-j JOBS] [--check] [OP ...]

Runs every OpInfo op (forward and backward) on dipu against CPU, writes
``opinfo_expected_failures.json`` (op -> {mode: reason}) and ``opinfo_skips.json``, and rewrites the
generated section of ``docs/opinfo.md``. ``--check`` only prints the differences to the checked-in
list. Naming ops runs only those and updates only their entries.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance_update  # noqa: E402
import opinfo_harness as h  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(conformance_update.main(h.suite(), __doc__, "Ops in the suite (float32 on CPU)"))
