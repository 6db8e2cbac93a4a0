"""Regenerate the ModuleInfo conformance expectations and the generated section of docs/moduleinfo.md.

    python tests/torch_dipu/update_moduleinfo_expectations.py [-j JOBS] [--check] [MODULE ...]

Runs every ModuleInfo module (forward and backward, train and eval) on dipu against CPU, writes
``moduleinfo_expected_failures.json`` (module -> {mode: reason}) and ``moduleinfo_skips.json``, and
rewrites the generated section of ``docs/moduleinfo.md``. ``--check`` only prints the differences to the
checked-in list. Naming modules (``nn.LSTMCell``) runs only those and updates only their entries.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance_update  # noqa: E402
import moduleinfo_harness as h  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(conformance_update.main(h.suite(), __doc__, "Modules in the suite (float32)"))
