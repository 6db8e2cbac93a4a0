"""Test-session settings shared by every package's tests.

``import ditorch`` activates a vendor adapter and patches ``torch.cuda`` and device arguments by
design. Tests that import ditorch modules in the pytest process itself (the CLI, the demo) must not
change torch for the other tests that share the worker process, so mocking is off here; the tests of
mocking and detection run in subprocesses with their own environment.
"""

import os

os.environ["DITORCH_DISABLE_MOCK"] = "1"
os.environ["DITORCH_QUIET"] = "1"
