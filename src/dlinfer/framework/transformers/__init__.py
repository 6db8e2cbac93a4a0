"""The transformers adaptor: dlinfer's ops inside Hugging Face models, with no model file edited.

>>> from dlinfer.framework import transformers as dlinfer_tf
>>> print(dlinfer_tf.supported(model))           # what would be replaced, kept stock (why), or refused (why)
>>> dlinfer_tf.install(model, block_size=16)     # model.generate() now runs on dlinfer ops over a paged cache
>>> dlinfer_tf.uninstall(model)                  # stock again, exactly
>>> dlinfer_tf.install()                         # every model constructed from now on (uninstall() undoes it)

See docs/dlinfer.md, "The transformers adaptor".
"""

from .block_manager import BlockManager, BlockPoolExhausted
from .context import StepContext
from .install import install, installed, new_cache, uninstall
from .paged_cache import PagedCache
from .report import Support, supported

__all__ = ["BlockManager", "BlockPoolExhausted", "PagedCache", "StepContext", "Support", "install", "installed",
           "new_cache", "supported", "uninstall"]
