"""The cost of module_tools.ModuleDump on the W1 training step: statistics only and full dumps vs no dump.

    python benchmarks/bench_module_dump.py [--out FILE] [--rounds N] [--steps N] [--devices cpu,dipu]

Per device, one W1 model (benchmarks/bench_common.W1, AdamW, input ids (2, 64)) trains in interleaved rounds:
``--steps`` steps with no dump, then under ``ModuleDump(stats_only=True)``, then under a full dump (the order
rotates each round). Cases ``w1_step_ms_<mode>_<device>``: value = median ms per step under the dump, baseline =
median ms per step with no dump, ratio = median of the per-round ratios (the issue's goal for statistics only:
<= 2). The dumps write into a temporary folder. Writes one JSON file in the project's benchmark format.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench_common import W1, environment, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "module_dump.json"
MODES = ("plain", "stats_only", "full")


def _setup(device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**W1)).to(device)
    ids = torch.randint(0, W1["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(0)).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), ids


def _round(mode: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor, steps: int,
           workdir: Path) -> float:
    """Median seconds per step of ``steps`` steps under ``mode``."""
    from module_tools import ModuleDump

    dump = (contextlib.nullcontext() if mode == "plain"
            else ModuleDump(model, workdir / mode, stats_only=mode == "stats_only"))
    times = []
    with dump:
        for _ in range(steps):
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()
            if mode != "plain":
                dump.step()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--devices", default="cpu,dipu")
    args = parser.parse_args(argv)
    results = []
    for device in [d for d in args.devices.split(",") if d]:
        if device.startswith("dipu"):
            import torch_dipu  # noqa: F401
        model, optimizer, ids = _setup(device)
        seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
        with tempfile.TemporaryDirectory(prefix="bench_module_dump-") as tmp:
            _round("plain", model, optimizer, ids, 1, Path(tmp))  # warm-up
            for r in range(args.rounds):
                for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                    seconds[mode].append(_round(mode, model, optimizer, ids, args.steps, Path(tmp) / str(r)))
        for mode in MODES[1:]:
            ratio = statistics.median(v / b for v, b in zip(seconds[mode], seconds["plain"], strict=True))
            value, base = statistics.median(seconds[mode]) * 1e3, statistics.median(seconds["plain"]) * 1e3
            results.append({"case": f"w1_step_ms_{mode}_{device}", "value": round(value, 3),
                            "baseline": round(base, 3), "ratio": round(ratio, 3), "unit": "ms"})
            print(f"{device} {mode}: {value:.1f} ms per step vs {base:.1f} ms with no dump, ratio {ratio:.2f}")
    write_json(args.out, {"name": "module_dump_overhead", "unit": "ms per W1 step", "results": results,
                          "env": {**environment(), "rounds": args.rounds, "steps": args.steps}})
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
