"""tests/vendors: ditorch and its tools on a real C++ PrivateUse1 plugin that nobody here wrote.

The plugin is torch_openreg, PyTorch's reference out-of-tree backend (sources and build script in
``../shared/vendors/``). It registers a ``torch.backends`` entry point, so every ``import torch`` in an environment
where it is installed loads it and takes PrivateUse1: it cannot share an environment with torch_dipu. ``.ci/run``
builds it into ``.venv-openreg`` and runs ``pytest tests/vendors`` there. In any environment without it (the
README's test command) every test here is skipped with one reason.
"""

from __future__ import annotations

import importlib.util

import pytest

PLUGIN = "torch_openreg"
SKIP_REASON = (f"{PLUGIN} is not installed in this environment (.ci/run builds it from ../shared/vendors into "
               f".venv-openreg and runs tests/vendors there)")


def plugin_installed() -> bool:
    return importlib.util.find_spec(PLUGIN) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if plugin_installed():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    here = str(config.rootpath / "tests" / "vendors")
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(skip)
