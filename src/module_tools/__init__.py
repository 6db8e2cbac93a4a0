"""module_tools: planned (see the project's issues)."""
