"""Shared by dicp's tests: every test gets its own compile cache folder (``DICP_CACHE_DIR`` in ``tmp_path``),
a configuration read afresh, an empty compile report and empty dynamo caches."""

from __future__ import annotations

import pytest
import torch

from dicp.config import reset_config
from dicp.dynamo_bridge.report import reset_report


@pytest.fixture(autouse=True)
def dicp_isolated(tmp_path, monkeypatch):
    """DICP_CACHE_DIR in ``tmp_path``; no DICP_* switch from the outer environment; fresh report and dynamo."""
    for name in ("DICP_PRECISION_CHECK", "DICP_CACHE", "DICP_SHAPE_CHECK", "DICP_ORT_THREADS", "DICP_ORT_SPIN",
                 "DICP_REPORT", "DICP_STRICT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DICP_CACHE_DIR", str(tmp_path / "dicp_cache"))
    reset_config()
    reset_report(announced=True)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    reset_config()
    reset_report(announced=True)
