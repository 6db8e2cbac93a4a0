"""One run of ``ditorch parity`` (:mod:`module_tools.parity`), in its own interpreter:
``python -m ditorch.parity_run --child ref|test --steps N --out DIR [...] -- script.py args``.

It lives in ditorch, the layer above module_tools, because the run needs ditorch: the reference run maps cuda
to the CPU, the device run imports ditorch for the vendor adapter and the cuda mapping.
"""

from __future__ import annotations

import argparse
import random
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from module_tools.parity import _RUN_NAMES, SEED

__all__ = ["main"]


def _seed_everything(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def _map_cuda_to_cpu() -> None:
    """Point ditorch's cuda mapping at the CPU: ``torch.cuda`` answers for the CPU, ``"cuda"`` means ``"cpu"``;
    seeding and the random state are the CPU generator's."""
    import torch

    from ditorch import mocking
    from ditorch.adapters.base import Adapter

    shim = types.ModuleType("ditorch_cpu_as_cuda")
    shim.__dict__.update({k: v for k, v in vars(torch.cpu).items() if not k.startswith("__")})

    def nothing(*_: Any, **__: Any) -> None:
        return None

    shim.__dict__.update(
        manual_seed=nothing, manual_seed_all=nothing, seed=nothing, seed_all=nothing, empty_cache=nothing,
        initial_seed=torch.initial_seed, get_rng_state=lambda device=None: torch.get_rng_state(),
        set_rng_state=lambda state, device=None: torch.set_rng_state(state), is_available=lambda: True,
        device_count=lambda: 1, current_device=lambda: 0)

    class _CpuAsCuda(Adapter):
        def device_module(self) -> types.ModuleType:
            return shim

    mocking.install(_CpuAsCuda(name="cpu", framework="torch", device_type="cpu", dist_backend="gloo"))


def main(argv: Sequence[str]) -> int:
    """Run one side of a parity comparison; the script's exit status (3: no model found)."""
    p = argparse.ArgumentParser(prog="python -m ditorch.parity_run")
    p.add_argument("--child", choices=sorted(_RUN_NAMES), required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stats-only", action="store_true")
    p.add_argument("--no-random-on-cpu", action="store_true")
    p.add_argument("--fixed-input", default=None)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    import ditorch  # noqa: F401  (the vendor adapter and the cuda mapping)
    from module_tools.dump_command import run_dumped

    tools: list[Any] = []
    if a.child == "ref":
        _map_cuda_to_cpu()
    else:
        from op_tools.tool import active_device_type

        if active_device_type() == "cpu":
            print("ditorch parity: no accelerator; the device run runs on the CPU too", file=sys.stderr)
        elif not a.no_random_on_cpu:
            from op_tools.random_on_cpu import OpRandomOnCPU

            tools.append(OpRandomOnCPU(results_dir=str(Path(a.out).parent / "op_tools")).start())
    _seed_everything(SEED)
    script_args = a.args[1:] if a.args[:1] == ["--"] else a.args
    try:
        status, dump = run_dumped(a.script, script_args, a.out, stats_only=a.stats_only, steps=range(a.steps),
                                  stop_after=a.steps, fixed_input=a.fixed_input)
    finally:
        for tool in tools:
            tool.stop()
    if status == 0 and dump is None:
        print("ditorch parity: the script called no module with parameters; nothing dumped", file=sys.stderr)
        return 3
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(main(sys.argv[1:]))
    sys.exit("usage: ditorch parity [--steps N] [--out DIR] [--stats-only] -- script.py [args ...]")
