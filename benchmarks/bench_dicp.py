"""dicp on the CPU: compile time and step time of ``torch.compile(backend="onnxgraph")`` vs eager and inductor.

    python benchmarks/bench_dicp.py [--out FILE] [--rounds 5] [--steps 3] [--batch 8] [--seq 256] [--threads N]
                                    [--no-inductor] [--no-train] [--train-variants fp32,dropout,bf16]

On one run, per backend (eager, onnxgraph, inductor unless ``--no-inductor``), each on its own model (same
seed): the first call of each (onnxgraph's and inductor's caches in an empty temporary folder, so the compiles
are cold), then ``--rounds`` interleaved rounds of ``--steps`` calls per backend (the order rotating; step time
= median of the rounds' medians, ratio = median of the per-round ratios to eager):

- ``llama_infer``: the W1 Llama (benchmarks/bench_common.W1) forward under ``torch.no_grad``, input ids of
  shape (``--batch``, ``--seq``), ``use_cache=False``: ``llama_infer_first_call_s_<backend>`` (the first call:
  compile plus one run; eager: one run), ``llama_infer_step_ms_<backend>`` (baseline = eager; the issue's goal
  for onnxgraph is ratio <= 1) and whether its logits equal eager's (``diopi.compare``);
- ``w1_train``: the W1 training step (input ids (2, 64), AdamW): ``w1_train_first_step_s_<backend>`` and
  ``w1_train_step_ms_<backend>`` (baseline = eager); with ``--train-variants`` (default all three) also
  ``w1_train_dropout_*`` (``attention_dropout=0.1``: the attention's dropout in the graph) and ``w1_train_bf16_*``
  (the forward under ``torch.autocast("cpu", torch.bfloat16)``), each measured as its own interleaved set.

The onnxgraph first call is the issue's "first compile" (goal: under 3 s), reported with ``target`` 3.0.
Writes one JSON file in the project's benchmark format (default benchmarks/results/dicp.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench_common import W1, environment, w1_step, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dicp.json"
FIRST_COMPILE_TARGET_S = 3.0


def _llama_eval() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**W1)).eval()


def _compiled(model: torch.nn.Module, backend: str) -> Callable[..., object]:
    return model if backend == "eager" else torch.compile(model, backend=backend)


class Runner:
    """One backend's model and step: ``first()`` times the first call (the compile), ``round(steps)`` the next."""

    def __init__(self, backend: str, step: Callable[[], object]) -> None:
        self.backend, self.step = backend, step
        self.first_s = 0.0
        self.result: object = None
        self.rounds_ms: list[float] = []

    def first(self) -> None:
        start = time.perf_counter()
        self.result = self.step()
        self.first_s = time.perf_counter() - start

    def round(self, steps: int) -> None:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - start)
        self.rounds_ms.append(statistics.median(times) * 1e3)


def inference_runner(backend: str, batch: int, seq: int) -> Runner:
    model = _llama_eval()
    call = _compiled(model, backend)
    ids = torch.randint(0, W1["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))

    def step() -> torch.Tensor:
        with torch.no_grad():
            return call(input_ids=ids, use_cache=False).logits

    return Runner(backend, step)


#: ``--train-variants``: case name suffix, LlamaConfig fields over W1's, autocast dtype.
TRAIN_VARIANTS: dict[str, tuple[str, dict, torch.dtype | None]] = {
    "fp32": ("", {}, None),
    "dropout": ("_dropout", {"attention_dropout": 0.1}, None),
    "bf16": ("_bf16", {}, torch.bfloat16),
}


def training_runner(backend: str, variant: str = "fp32") -> Runner:
    _, config, autocast = TRAIN_VARIANTS[variant]
    return Runner(backend, w1_step("cpu", backend=None if backend == "eager" else backend, config=config,
                                   autocast=autocast))


def measure(runners: list[Runner], rounds: int, steps: int) -> None:
    """Each runner's first call (one after the other; dynamo keeps one cache entry per backend), then ``rounds``
    interleaved rounds of ``steps`` calls (the order rotating), so that a change in the machine's load hits every
    backend alike."""
    if not runners:
        return
    torch._dynamo.reset()
    for runner in runners:
        runner.first()
    for r in range(rounds):
        for runner in runners[r % len(runners):] + runners[:r % len(runners)]:
            runner.round(steps)


def _ratio(runner: Runner, base: Runner) -> float:
    """Median of the per-round ratios to the baseline."""
    return statistics.median(v / b for v, b in zip(runner.rounds_ms, base.rounds_ms, strict=True))


def _row(case: str, value: float, unit: str, **extra: object) -> dict:
    return {"case": case, "value": round(value, 4), "unit": unit, **extra}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=3, help="timed calls per backend and round")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (onnxgraph's ORT sessions follow it); 0: torch's default")
    parser.add_argument("--no-inductor", action="store_true", help="skip inductor (slow to compile)")
    parser.add_argument("--no-train", action="store_true", help="skip the W1 training step")
    parser.add_argument("--train-variants", default=",".join(TRAIN_VARIANTS),
                        help=f"comma-separated training variants of {sorted(TRAIN_VARIANTS)}")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.train_variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(TRAIN_VARIANTS))
    if unknown:
        parser.error(f"--train-variants: unknown {unknown}; known: {sorted(TRAIN_VARIANTS)}")
    from diopi.compare import all_passed, compare_outputs

    if args.threads:
        torch.set_num_threads(args.threads)

    backends = ["eager", "onnxgraph"] + ([] if args.no_inductor else ["inductor"])
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_dicp-") as cache_dir:
        os.environ["DICP_CACHE_DIR"] = cache_dir  # cold compile caches: every first call compiles
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir, "inductor")
        from dicp.config import reset_config

        reset_config()
        infer = [inference_runner(b, args.batch, args.seq) for b in backends]
        measure(infer, args.rounds, args.steps)
        trains: dict[str, list[Runner]] = {}
        for variant in [] if args.no_train else variants:
            trains[variant] = [training_runner(b, variant) for b in backends]
            measure(trains[variant], args.rounds, args.steps)
    base = infer[0]
    for runner in infer:
        equal = all_passed(compare_outputs(runner.result, base.result))
        ms, ratio = statistics.median(runner.rounds_ms), _ratio(runner, base)
        extra = {"target": FIRST_COMPILE_TARGET_S} if runner.backend == "onnxgraph" else {}
        results.append(_row(f"llama_infer_first_call_s_{runner.backend}", runner.first_s, "s", **extra))
        results.append(_row(f"llama_infer_step_ms_{runner.backend}", ms, "ms",
                            baseline=round(statistics.median(base.rounds_ms), 4), ratio=round(ratio, 3),
                            equal_to_eager=equal))
        print(f"inference {runner.backend}: first call {runner.first_s:.2f} s, {ms:.1f} ms per step "
              f"({ratio:.2f} x eager), logits equal eager: {equal}")
    for variant, train in trains.items():
        base, suffix = train[0], TRAIN_VARIANTS[variant][0]
        for runner in train:
            ms, ratio = statistics.median(runner.rounds_ms), _ratio(runner, base)
            results.append(_row(f"w1_train{suffix}_first_step_s_{runner.backend}", runner.first_s, "s"))
            results.append(_row(f"w1_train{suffix}_step_ms_{runner.backend}", ms, "ms",
                                baseline=round(statistics.median(base.rounds_ms), 4), ratio=round(ratio, 3),
                                first_loss=round(float(runner.result), 6)))
            print(f"training {variant} {runner.backend}: first step {runner.first_s:.2f} s, {ms:.1f} ms per step "
                  f"({ratio:.2f} x eager)")
    write_json(args.out, {"name": "dicp_compile", "unit": "s (first call) and ms (median step)", "results": results,
                          "env": {**environment(), "rounds": args.rounds, "steps": args.steps, "batch": args.batch,
                                  "seq": args.seq, "backends": backends,
                                  "train_variants": list(trains)}})
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
