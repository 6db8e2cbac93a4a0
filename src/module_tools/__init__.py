"""module_tools: dump a model's module calls (forward and backward) and read the dumps back.

``ModuleDump(model, out_dir)`` records every module call; ``dump_from_env(model)`` does the same from
``MODULE_DUMP_DIR``; ``load_dump(path)`` reads a dump. See docs/module_tools.md.
"""

from __future__ import annotations

import torch

from .config import dump_config
from .dump import FORMAT, ModuleDump
from .dump_reader import Dump, DumpError, load_dump

__all__ = ["FORMAT", "Dump", "DumpError", "ModuleDump", "dump_from_env", "load_dump"]


def dump_from_env(model: torch.nn.Module) -> ModuleDump | None:
    """A started :class:`ModuleDump` of ``model`` when ``MODULE_DUMP_DIR`` is set (with
    ``MODULE_DUMP_STATS_ONLY``, ``MODULE_DUMP_STEPS`` and ``MODULE_DUMP_FIXED_INPUT``), else None. Steps end
    at each ``optimizer.step()`` (op_tools' step count); the dump stops (and writes its index) at the end of the
    process, or earlier by ``stop()``."""
    config = dump_config()
    if config.out_dir is None:
        return None
    import atexit

    dump = ModuleDump(model, config.out_dir, stats_only=config.stats_only, steps=config.steps,
                      fixed_input=config.fixed_input).start()
    atexit.register(dump.stop)
    return dump
