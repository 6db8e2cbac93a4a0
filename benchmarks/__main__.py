"""``python -m benchmarks``: the benchmark suite (bench_suite.py); see benchmarks/README.md."""

import sys
from pathlib import Path

# The scripts import each other by their plain names, as when run as ``python benchmarks/<script>.py``.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from bench_suite import main  # noqa: E402

sys.exit(main())
