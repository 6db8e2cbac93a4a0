"""Case configs, one module per family of :mod:`diopi.functions` (``CONFIGS``: a list of
:class:`diopi.conformance.spec.Config`)."""
