"""``torch.npu`` of the fake torch_npu: the ``torch.cuda``-style queries, answered for two devices."""

from types import SimpleNamespace

import torch

NAME = "Fake Ascend 910B"
COUNT = 2
MEMORY = 64 * 2**30
_current = 0


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def device_count() -> int:
    return COUNT


def current_device() -> int:
    return _current


def set_device(device) -> None:
    global _current
    _current = torch.device("npu", device).index if isinstance(device, int) else torch.device(device).index or 0


def synchronize(device=None) -> None:
    pass


def get_device_name(device=None) -> str:
    return NAME


def get_device_properties(device=None) -> SimpleNamespace:
    return SimpleNamespace(name=NAME, total_memory=MEMORY, multi_processor_count=1)


def get_amp_supported_dtype() -> list:
    return [torch.float16, torch.bfloat16]


def manual_seed(seed: int) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    pass


def memory_allocated(device=None) -> int:
    return 0
