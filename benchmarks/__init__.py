"""The project's benchmarks (run ``python -m benchmarks`` for the suite; see README.md). The scripts in this
folder import each other by their plain names (``from bench_common import ...``), as when run as scripts."""
