"""``python -m diopi.conformance``: see :mod:`diopi.conformance.cli`."""

import sys

from diopi.conformance.cli import main

sys.exit(main())
