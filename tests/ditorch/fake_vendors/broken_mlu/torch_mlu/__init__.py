"""A test-only torch_mlu whose import fails, as a plugin built against a missing driver would."""

raise ImportError("libcnrt.so: cannot open shared object file (fake torch_mlu for tests)")
