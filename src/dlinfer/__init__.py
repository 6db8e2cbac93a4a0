"""dlinfer: fused LLM inference operators behind one interface (``dlinfer.ops``, also ``torch.ops.dlinfer``),
vendor kernels per device (entry point group ``dlinfer.vendors``) with a plain-torch reference behind every
operator, and framework adaptors (``dlinfer.framework.transformers``). See docs/dlinfer.md."""

from . import reference  # noqa: F401  (its modules register the reference kernels)
from .registry import kernel_counts, op_counts, reset_counts

__all__ = ["kernel_counts", "op_counts", "reset_counts"]
