"""ditorch: a device-independent PyTorch stack for AI chips.

For now importing ``ditorch`` has no side effects; the command-line interface lives in
:mod:`ditorch.cli` (``ditorch --help``).
"""

__version__ = "0.1.0"
