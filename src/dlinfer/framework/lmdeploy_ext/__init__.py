"""LMDeploy on any device dlinfer serves, with nothing outside dlinfer: LMDeploy imports this package when its
PyTorch engine starts on one of its dlinfer device types (``PytorchEngineConfig(device_type="maca")`` or
``"camb"``), as upstream dlinfer's place for device patches.

Importing it patches LMDeploy's dlinfer op backends for those device types (:mod:`.backends`):

- **the step context** (:mod:`.step_context`): one generic builder of the attention metadata LMDeploy's dlinfer
  kernels read (cumulative query ends and kv lengths on the host, flat cache slots of the new tokens, the prefill
  without cache flag), for whatever device the engine's ``cuda`` tensors live on (``import ditorch`` maps
  ``cuda`` to the vendor's device);
- **the KV cache layout**: ``(block_size, num_kv_heads, head_dim)`` per block, dlinfer's paged layout;
- **the graph runner** (:mod:`.graph_runner`): CUDA graphs where the device captures them; an eager runner
  otherwise, with a warning when graph mode was asked for.

See docs/dlinfer.md, "LMDeploy".
"""

from __future__ import annotations

from .backends import patch_backends

__all__ = ["patch_backends"]

patch_backends()
