"""``python -m ditorch`` runs the ditorch command-line interface."""

import sys

from ditorch.cli import main

sys.exit(main())
