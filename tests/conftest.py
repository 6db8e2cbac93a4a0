"""Test-session settings shared by every package's tests.

``import ditorch`` activates a vendor adapter and patches ``torch.cuda`` and device arguments by
design. Tests that import ditorch modules in the pytest process itself (the CLI, the demo) must not
change torch for the other tests that share the worker process, so mocking is off here; the tests of
mocking and detection run in subprocesses with their own environment.
"""

import os

os.environ["DITORCH_DISABLE_MOCK"] = "1"
os.environ["DITORCH_QUIET"] = "1"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # CI runs two xdist workers on two cores: one intra-op thread each, so torch's thread pools do not fight
    # over the cores (a 16-token generate() took seconds instead of tens of milliseconds when they did)
    import torch

    torch.set_num_threads(1)
