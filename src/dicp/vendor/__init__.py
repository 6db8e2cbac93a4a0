"""dicp vendors: one package per vendor graph compiler (``dicp.vendor.<name>``), each exposing a dynamo backend
registered under the ``torch_dynamo_backends`` entry point group."""
