"""The transformers adaptor: dlinfer's ops inside Hugging Face models, with no model file edited.

>>> from dlinfer.framework import transformers as dlinfer_tf
>>> dlinfer_tf.install(model, block_size=16)     # model.generate() now runs on dlinfer ops over a paged cache
>>> dlinfer_tf.uninstall(model)                  # stock again, exactly

See docs/dlinfer.md, "The transformers adaptor".
"""

from .block_manager import BlockManager, BlockPoolExhausted
from .context import StepContext
from .install import install, installed, new_cache, uninstall
from .paged_cache import PagedCache

__all__ = ["BlockManager", "BlockPoolExhausted", "PagedCache", "StepContext", "install", "installed", "new_cache",
           "uninstall"]
