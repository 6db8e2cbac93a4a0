"""One run of ``ditorch parity`` (:mod:`module_tools.parity`), in its own interpreter:
``python -m ditorch.parity_run --child ref|test --steps N --out DIR [...] -- script.py args``; and
``python -m ditorch.parity_run --probe``: the device's answers to the ``torch.cuda`` queries scripts choose their
dtype by (:data:`PROBED`), as JSON, which the reference run then gives too (``--device-answers``).

It lives in ditorch, the layer above module_tools, because the run needs ditorch: the reference run maps cuda
to the CPU, the device run imports ditorch for the vendor adapter and the cuda mapping.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from module_tools.parity import RUN_NAMES, SEED

__all__ = ["PROBED", "main", "probe"]

#: The ``torch.cuda`` queries a script chooses its dtype and kernels by (nanoGPT: ``dtype = 'bfloat16' if
#: torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'``). The reference run answers them as
#: the device does, so that both runs take the same branch and compute in the same dtype; the CPU's own answer
#: would differ on a device without bfloat16.
PROBED = ("is_bf16_supported", "get_device_capability")


def _seed_everything(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def probe() -> dict[str, Any]:
    """The device's answers to :data:`PROBED` (after ``import ditorch``), JSON-ready; ``{}`` without an
    accelerator. A query the device refuses is left out (the reference run keeps the CPU's answer)."""
    import torch

    import ditorch  # noqa: F401  (the vendor adapter and the cuda mapping)
    from op_tools.tool import active_device_type

    if active_device_type() == "cpu":
        return {}
    answers: dict[str, Any] = {}
    for name in PROBED:
        try:
            value = getattr(torch.cuda, name)()
        except Exception:  # noqa: BLE001 - NotSupportedOnDevice or a vendor's error: no answer to copy
            continue
        answers[name] = list(value) if isinstance(value, tuple) else value
    return answers


def _map_cuda_to_cpu(device_answers: dict[str, Any] | None = None) -> None:
    """Point ditorch's cuda mapping at the CPU: ``torch.cuda`` answers for the CPU, ``"cuda"`` means ``"cpu"``;
    seeding and the random state are the CPU generator's; ``device_answers`` (:func:`probe`'s) replace the CPU's
    answers to those queries (``get_device_capability`` also gives ``get_device_properties``' major and minor)."""
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
    answers = device_answers or {}
    if "is_bf16_supported" in answers:
        bf16 = bool(answers["is_bf16_supported"])
        shim.is_bf16_supported = lambda including_emulation=True: bf16
    if "get_device_capability" in answers:
        major, minor = (int(x) for x in answers["get_device_capability"])
        shim.get_device_capability = lambda device=None: (major, minor)
        shim.get_device_properties = lambda device=None: types.SimpleNamespace(name="cpu", major=major, minor=minor)

    class _CpuAsCuda(Adapter):
        def device_module(self) -> types.ModuleType:
            return shim

    mocking.install(_CpuAsCuda(name="cpu", framework="torch", device_type="cpu", dist_backend="gloo"))
    _pin_on_cpu()


#: The ``aten`` library holding :func:`_pin_on_cpu`'s kernel (kept alive: the registration lasts as long as it).
_PIN_LIBRARY: list[Any] = []


def _pin_on_cpu() -> None:
    """``Tensor.pin_memory()`` with cuda meaning the CPU: page-locked memory exists only for copies to an
    accelerator, and a build without one has no pinned allocator (PyTorch raises "Cannot access accelerator device
    when none is available"), so the call returns what pinning returns apart from the page locking: a copy in new
    host memory with the same sizes and strides. ``is_pinned()`` stays PyTorch's (False). Where an accelerator is
    present (PyTorch has a pinned allocator), the call goes to PyTorch's kernel unchanged."""
    import torch

    if _PIN_LIBRARY:
        return
    original = torch.library.get_kernel("aten::_pin_memory", "CPU")

    def _pin_memory(keyset: Any, self: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
        if torch.accelerator.current_accelerator() is not None:
            return original.call_boxed(keyset, self, device)
        return torch.empty_strided(self.size(), self.stride(), dtype=self.dtype).copy_(self)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_pin_memory", _pin_memory, "CPU", with_keyset=True)
    _PIN_LIBRARY.append(lib)


def main(argv: Sequence[str]) -> int:
    """Run one side of a parity comparison; the script's exit status (3: no model found)."""
    p = argparse.ArgumentParser(prog="python -m ditorch.parity_run")
    p.add_argument("--child", choices=sorted(RUN_NAMES), required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stats-only", action="store_true")
    p.add_argument("--no-random-on-cpu", action="store_true")
    p.add_argument("--fixed-input", default=None)
    p.add_argument("--device-answers", default=None, help="JSON: probe()'s answers, for the reference run")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    import ditorch  # noqa: F401  (the vendor adapter and the cuda mapping)
    from module_tools.dump_command import run_dumped

    tools: list[Any] = []
    if a.child == "ref":
        answers = json.loads(a.device_answers) if a.device_answers else {}
        _map_cuda_to_cpu(answers)
        if answers:
            said = ", ".join(f"torch.cuda.{name}() = {tuple(value) if isinstance(value, list) else value}"
                             for name, value in answers.items())
            print(f"ditorch parity: the reference run answers as the device does: {said}", file=sys.stderr)
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
        status, dump = run_dumped(a.script, script_args, a.out, stats_only=a.stats_only, steps=range(1, a.steps + 1),
                                  stop_after=a.steps, fixed_input=a.fixed_input)
    except Exception as exc:
        from ditorch.run import print_script_exception

        if not print_script_exception(exc):  # not the script's: ditorch's own traceback, in full
            raise
        return 1  # the script raised: its traceback, as `python script.py` prints it
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
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        sys.exit(0)
    sys.exit("usage: ditorch parity [--steps N] [--out DIR] [--stats-only] -- script.py [args ...]")
