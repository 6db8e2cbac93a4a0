"""dlinfer: planned (see the project's issues)."""
