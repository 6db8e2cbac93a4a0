"""The DIOPI conformance suite: declarative case configs, reference data generation and runs against a vendor
implementation (``--impl``) or a torch device (``--device``)."""
