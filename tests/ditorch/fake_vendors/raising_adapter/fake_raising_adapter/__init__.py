"""A test-only vendor package whose ``ditorch.adapters`` entry point raises when called (a broken adapter)."""


def adapter():  # noqa: ANN201
    raise RuntimeError("driver 5.1 is older than the 6.0 this adapter needs (fake adapter for tests)")
