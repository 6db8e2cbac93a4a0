"""tokens/s of stock transformers ``generate()`` vs the dlinfer adaptor's, on the CPU, prefill and decode apart.

    python benchmarks/bench_dlinfer.py [--out FILE] [--rounds 15] [--new-tokens 32] [--families llama,...]
                                       [--device cpu|cuda|dipu|...] [--quick]

For each tiny config (ditorch.models' text families llama, qwen2, qwen3, qwen3_moe, plus a Mixtral config built
here) one process builds the model once (float32, seed 0) and, in every round, runs greedy ``generate()`` on a
left-padded batch of two prompts (24 and 17 tokens) stock and with ``dlinfer.framework.transformers.install``
(block size 16), the order alternating from round to round. A streamer stamps each generated step (after the
device finished it): prefill is the time to the first new token (prompt tokens / second), decode the rest (new
tokens after the first, all rows, / second). Per case (``<config>_prefill``, ``<config>_decode``): ``value`` =
dlinfer tokens/s (median of the rounds), ``baseline`` = stock tokens/s (median), ``ratio`` = baseline / value,
i.e. how many times slower dlinfer is (the target is <= 1.0: at least as fast as stock, ``met``);
``paired_ratio`` = the median over rounds of dlinfer's time / stock's time in the same round (the two run back to
back, so a slow period of the machine cancels out). ``same_tokens`` says whether both generated the same ids in
every round.
``DITORCH_DISABLE_MOCK=1`` is set unless given: importing ditorch.models imports ditorch, whose cuda mocking
wraps ``Tensor.to`` in Python, a cost neither side needs on the CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import finish  # noqa: E402

# ditorch.models imports ditorch, whose cuda mocking wraps Tensor.to (a Python call per .to on the CPU, which the
# reference kernels use more than stock); neither side needs it here
os.environ.setdefault("DITORCH_DISABLE_MOCK", "1")
os.environ.setdefault("DITORCH_QUIET", "1")

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dlinfer.json"
FAMILIES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral")
PROMPT_LENGTHS = (24, 17)
BLOCK_SIZE = 16
TARGET_RATIO = 1.0


def build(name: str) -> torch.nn.Module:
    """The tiny model ``name`` (float32, seed 0, eval, never stopping at an EOS id): ditorch.models' families as
    ``ditorch generate`` loads them, Mixtral built here (ditorch.models has no Mixtral)."""
    if name != "mixtral":
        from ditorch.generate import load_model

        return load_model(name).model
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                           num_experts_per_tok=2, sliding_window=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = MixtralForCausalLM(config)
    model.generation_config.eos_token_id = None  # random weights: always generate every token
    return model.eval()


def prompts() -> dict[str, torch.Tensor]:
    """A left-padded batch of two prompts of different lengths (fixed ids)."""
    width = max(PROMPT_LENGTHS)
    gen = torch.Generator().manual_seed(1)
    ids = torch.zeros((len(PROMPT_LENGTHS), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(PROMPT_LENGTHS):
        ids[row, width - n:] = torch.randint(1, 999, (n,), generator=gen)
        mask[row, width - n:] = 1
    return {"input_ids": ids, "attention_mask": mask}


class StepClock:
    """A ``generate()`` streamer that notes when each step's tokens come out (the first ``put`` is the prompt),
    after the accelerator finished the step's work."""

    def __init__(self, device: torch.device) -> None:
        self.stamps: list[float] = []
        self.sync = (lambda: None) if device.type == "cpu" else torch.accelerator.synchronize

    def put(self, value: torch.Tensor) -> None:
        self.sync()
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        self.sync()
        self.stamps.append(time.perf_counter())


def timed_generate(model: torch.nn.Module, batch: dict[str, torch.Tensor], new_tokens: int,
                   use_dlinfer: bool) -> tuple[float, float, list[list[int]]]:
    """(prefill seconds, decode seconds after the first token, generated ids) of one greedy ``generate()``."""
    if use_dlinfer:
        from dlinfer.framework import transformers as dlinfer_tf

        dlinfer_tf.install(model, block_size=BLOCK_SIZE)
    clock = StepClock(batch["input_ids"].device)
    try:
        with torch.no_grad():
            clock.sync()
            start = time.perf_counter()
            out = model.generate(**batch, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                                 streamer=clock)
            stop = time.perf_counter()
    finally:
        if use_dlinfer:
            dlinfer_tf.uninstall(model)
    first = clock.stamps[1]  # stamps[0]: the prompt, put before the first forward
    return first - start, stop - first, out[:, batch["input_ids"].shape[1]:].tolist()


def bench_family(name: str, rounds: int, new_tokens: int, device: torch.device) -> list[dict[str, Any]]:
    """The prefill and decode rows of one config."""
    model = build(name).to(device)
    batch = {key: value.to(device) for key, value in prompts().items()}
    prompt_tokens = int(batch["attention_mask"].sum())
    decode_tokens = len(PROMPT_LENGTHS) * (new_tokens - 1)
    for use in (False, True):  # warm-up (first-call allocations, lazy imports, kernel registration)
        timed_generate(model, batch, 2, use)
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    same = True
    for r in range(rounds):
        ids: dict[bool, list[list[int]]] = {}
        for use in ((False, True) if r % 2 == 0 else (True, False)):
            prefill, decode, ids[use] = timed_generate(model, batch, new_tokens, use)
            times[use].append((prefill, decode))
        same = same and ids[False] == ids[True]
    rows = []
    for phase, index, tokens in (("prefill", 0, prompt_tokens), ("decode", 1, decode_tokens)):
        value = tokens / statistics.median(t[index] for t in times[True])
        baseline = tokens / statistics.median(t[index] for t in times[False])
        paired = statistics.median(d[index] / s[index] for d, s in zip(times[True], times[False], strict=True))
        rows.append({"case": f"{name}_{phase}", "value": round(value, 2), "baseline": round(baseline, 2),
                     "ratio": round(baseline / value, 3), "paired_ratio": round(paired, 3), "unit": "tokens/s",
                     "target_ratio": TARGET_RATIO,
                     "met": baseline / value <= TARGET_RATIO, "tokens": tokens, "same_tokens": same,
                     "dlinfer_s": [round(t[index], 5) for t in times[True]],
                     "stock_s": [round(t[index], 5) for t in times[False]]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=15, help="rounds per config (median; default 15)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per prompt (default 32)")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"configs (default {','.join(FAMILIES)})")
    parser.add_argument("--device", default="cpu", help="the device the models run on (default cpu)")
    parser.add_argument("--quick", action="store_true", help="1 round of 4 new tokens: checks that it runs")
    args = parser.parse_args(argv)
    rounds, new_tokens = (1, 4) if args.quick else (args.rounds, args.new_tokens)
    if rounds < 1 or new_tokens < 2:
        parser.error("--rounds must be >= 1 and --new-tokens >= 2 (decode is timed after the first token)")
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"--families: unknown {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    try:
        import ditorch  # noqa: F401 - finds the vendor plugin, whose device (dipu, npu, ...) the models may run on

        device = torch.device(args.device)
        torch.empty(0, device=device)
    except (RuntimeError, ValueError) as exc:
        parser.error(f"--device {args.device!r}: {exc}")
    started = time.perf_counter()
    results = []
    for name in families:
        for row in bench_family(name, rounds, new_tokens, device):
            results.append(row)
            print(f"{row['case']:>18}: dlinfer {row['value']:9.1f} tokens/s, stock {row['baseline']:9.1f} tokens/s,"
                  f" ratio {row['ratio']:.3f}, paired {row['paired_ratio']:.3f} (target <= {TARGET_RATIO}),"
                  f" same tokens: {row['same_tokens']}")
    return finish(args.out, "dlinfer_generate_tokens_per_s", "tokens/s", results, started,
                  ["benchmarks/bench_dlinfer.py", *(argv or sys.argv[1:])], device=str(device), dtype="float32",
                  rounds=rounds, new_tokens=new_tokens, prompt_lengths=list(PROMPT_LENGTHS), block_size=BLOCK_SIZE,
                  ratio="stock tokens/s / dlinfer tokens/s (> 1: dlinfer slower)",
                  paired_ratio="median over rounds of dlinfer time / stock time of the same round",
                  DITORCH_DISABLE_MOCK=os.environ.get("DITORCH_DISABLE_MOCK"))


if __name__ == "__main__":
    sys.exit(main())
