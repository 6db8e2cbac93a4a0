"""Framework adaptors: they put dlinfer's operators into an inference framework without editing its files."""
