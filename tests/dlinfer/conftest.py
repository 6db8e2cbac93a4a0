"""Shared fixtures of the dlinfer tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread. With the suite's workers on every core, torch's spinning thread pool
    made a 16-token generate 100x slower (4 s instead of 0.04 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
