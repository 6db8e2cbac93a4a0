"""dicp: the ``torch.compile`` bridge to vendor graph compilers.

``dicp.dynamo_bridge`` turns the ATen FX graphs of AOTAutograd into a vendor's IR through the vendor's
conversion registry, and runs what the vendor compiles; ``dicp.vendor.<name>`` holds each vendor (the first one,
``onnxgraph``, compiles with ONNX Runtime). See docs/dicp.md.
"""
