"""Vendor kernels for dlinfer operators, one package per vendor, each registered through the ``dlinfer.vendors``
entry point group (a callable taking :class:`dlinfer.registry.KernelRegistry`)."""
