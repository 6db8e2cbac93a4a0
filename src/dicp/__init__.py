"""dicp: planned (see the project's issues)."""
