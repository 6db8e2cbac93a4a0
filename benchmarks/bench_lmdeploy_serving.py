"""Serving throughput on the dipu device: LMDeploy's PyTorch engine (through dlinfer, ``import ditorch``) against
transformers ``generate()`` request by request, on the same 16 requests.

    .venv-lmdeploy/bin/python benchmarks/bench_lmdeploy_serving.py [--out FILE] [--requests 16] [--quick]

Needs lmdeploy (``.ci/lmdeploy`` builds ``.venv-lmdeploy``); each side runs in a fresh process with cuda mocking
on, as a user runs it. The model: a tiny Llama (4 layers, hidden 256, 8 query / 4 kv heads, vocab 1024, float32,
seeded weights) saved with ``save_pretrained``; both sides compute in float16 (LMDeploy's engine serves float16 or
bfloat16 only). The requests: prompt lengths spread over 8-512 tokens and output
lengths over 8-64 tokens (fixed seed), greedy, never stopping early. LMDeploy gets all 16 at once (its scheduler
batches them, block size 16, eager mode); transformers gets them one after the other on ``cuda`` (dipu), its
stock ``DynamicCache``. Per side: generated tokens/s (``value`` for LMDeploy, ``baseline`` for transformers,
``ratio`` = LMDeploy / transformers, target >= 2), wall seconds, the device's peak allocated memory
(``torch.cuda.max_memory_allocated`` on dipu) and the KV cache's peak bytes: LMDeploy's block pool as allocated,
transformers' largest cache (the longest request's keys and values). ``same_tokens``: whether both generated the
same ids for every request (two float16 implementations may part at a near tie: ``requests_with_other_tokens``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import finish  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "lmdeploy_serving.json"
TARGET_RATIO = 2.0
VOCAB = 1024
CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, max_position_embeddings=1024, initializer_range=0.2, pad_token_id=0,
              bos_token_id=1, eos_token_id=2)


def requests(n: int, quick: bool) -> list[dict[str, Any]]:
    """``n`` requests: prompt ids (8-512 tokens) and output lengths (8-64), fixed seed."""
    rng = random.Random(0)
    top_prompt, top_out = (64, 8) if quick else (512, 64)
    out = []
    for i in range(n):
        prompt = 8 + (top_prompt - 8) * i // max(1, n - 1)
        rng_ids = [rng.randrange(4, VOCAB) for _ in range(prompt)]
        out.append({"ids": rng_ids, "new": rng.randint(min(8, top_out), top_out)})
    rng.shuffle(out)
    return out


def save_model(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dlinfer.framework.transformers.tiny_models import save_word_tokenizer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**CONFIG)).eval().save_pretrained(folder)
    save_word_tokenizer(folder, VOCAB)


# -- the two sides, each in its own process -------------------------------------------------------------------------
def run_lmdeploy(folder: str, reqs: list[dict[str, Any]]) -> dict[str, Any]:
    import torch
    from lmdeploy import GenerationConfig, PytorchEngineConfig, pipeline

    import ditorch  # noqa: F401
    from dlinfer.framework.lmdeploy_ext.requests import generate_ids

    blocks = sum(-(-(len(r["ids"]) + r["new"]) // 16) for r in reqs) + 16  # every request at once, and spare
    config = PytorchEngineConfig(device_type="maca", eager_mode=True, block_size=16, num_gpu_blocks=blocks,
                                 max_batch_size=len(reqs), session_len=1024)
    pipe = pipeline(folder, backend_config=config)
    try:
        gens = [GenerationConfig(max_new_tokens=r["new"], do_sample=False, top_k=1, ignore_eos=True) for r in reqs]
        warm = GenerationConfig(max_new_tokens=2, do_sample=False, top_k=1, ignore_eos=True)
        generate_ids(pipe, [reqs[0]["ids"]], [warm])
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        tokens = generate_ids(pipe, [r["ids"] for r in reqs], gens)
        wall = time.perf_counter() - start
        cache_bytes = _lmdeploy_cache_bytes(pipe)
        peak = torch.cuda.max_memory_allocated()
    finally:
        pipe.close()
    return {"tokens": tokens, "wall_s": wall, "peak_device_bytes": peak, "cache_bytes": cache_bytes}


def _lmdeploy_cache_bytes(pipe: Any) -> int | None:
    """Bytes of the engine's KV block pool (every layer's key and value caches), or None if not reachable."""
    try:
        agent = pipe.async_engine.engine.executor.model_agent
        caches = agent.cache_engine.gpu_cache
    except AttributeError:
        return None
    total = 0
    for layer in caches:
        for t in layer:
            if hasattr(t, "numel"):
                total += t.numel() * t.element_size()
    return total


def run_transformers(folder: str, reqs: list[dict[str, Any]]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    import ditorch  # noqa: F401

    # float16 like LMDeploy's engine (it serves float16/bfloat16 only), so that both compute in one precision
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float16).eval().to("cuda")
    with torch.no_grad():
        model.generate(torch.tensor([reqs[0]["ids"]], device="cuda"), max_new_tokens=2, do_sample=False,
                       eos_token_id=None, pad_token_id=0)
        torch.cuda.reset_peak_memory_stats()
        tokens, cache_peak = [], 0
        start = time.perf_counter()
        for r in reqs:
            out = model.generate(torch.tensor([r["ids"]], device="cuda"), max_new_tokens=r["new"], do_sample=False,
                                 eos_token_id=None, pad_token_id=0, return_dict_in_generate=True)
            tokens.append(out.sequences[0, len(r["ids"]):].tolist())
            cache = out.past_key_values
            size = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
            cache_peak = max(cache_peak, size)
        wall = time.perf_counter() - start
    return {"tokens": tokens, "wall_s": wall, "peak_device_bytes": torch.cuda.max_memory_allocated(),
            "cache_bytes": cache_peak}


def _child(side: str, folder: str, reqs_file: str) -> None:
    reqs = json.loads(Path(reqs_file).read_text())
    result = (run_lmdeploy if side == "lmdeploy" else run_transformers)(folder, reqs)
    print("RESULT " + json.dumps(result), flush=True)


def _run_side(side: str, folder: Path, reqs_file: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "DITORCH_DISABLE_MOCK"}
    env.setdefault("DITORCH_QUIET", "1")
    proc = subprocess.run([sys.executable, __file__, "--child", side, str(folder), str(reqs_file)],
                          capture_output=True, text=True, env=env, timeout=3000)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"bench_lmdeploy_serving: the {side} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(*argv[1:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--requests", type=int, default=16, help="number of requests (default 16)")
    parser.add_argument("--quick", action="store_true", help="short prompts and outputs: checks that it runs")
    args = parser.parse_args(argv)
    try:
        import lmdeploy  # noqa: F401
    except ImportError:
        parser.error("lmdeploy is not installed here: run it with .venv-lmdeploy/bin/python (bash .ci/lmdeploy)")
    started = time.perf_counter()
    reqs = requests(args.requests, args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        folder, reqs_file = Path(tmp) / "model", Path(tmp) / "requests.json"
        save_model(folder)
        reqs_file.write_text(json.dumps(reqs))
        lmd = _run_side("lmdeploy", folder, reqs_file)
        hf = _run_side("transformers", folder, reqs_file)
    generated = sum(r["new"] for r in reqs)
    value, baseline = generated / lmd["wall_s"], generated / hf["wall_s"]
    row = {"case": "serving_16_requests_tokens_per_s", "value": round(value, 2), "baseline": round(baseline, 2),
           "ratio": round(value / baseline, 3), "unit": "tokens/s", "target_ratio": TARGET_RATIO,
           "met": value / baseline >= TARGET_RATIO, "same_tokens": lmd["tokens"] == hf["tokens"],
           "requests": len(reqs), "generated_tokens": generated, "prompt_tokens": sum(len(r["ids"]) for r in reqs),
           "lmdeploy_wall_s": round(lmd["wall_s"], 3), "transformers_wall_s": round(hf["wall_s"], 3),
           "lmdeploy_peak_device_mb": round(lmd["peak_device_bytes"] / 2**20, 2),
           "transformers_peak_device_mb": round(hf["peak_device_bytes"] / 2**20, 2),
           "lmdeploy_kv_cache_mb": None if lmd["cache_bytes"] is None else round(lmd["cache_bytes"] / 2**20, 2),
           "transformers_peak_kv_cache_mb": round(hf["cache_bytes"] / 2**20, 2),
           "requests_with_other_tokens": [i for i, (a, b) in enumerate(zip(lmd["tokens"], hf["tokens"], strict=True))
                                          if a != b]}
    print(f"LMDeploy {value:.1f} tokens/s, transformers request by request {baseline:.1f} tokens/s: "
          f"{row['ratio']:.2f}x (target >= {TARGET_RATIO}), same tokens: {row['same_tokens']}")
    return finish(args.out, "lmdeploy_serving_tokens_per_s", "tokens/s", [row], started,
                  ["benchmarks/bench_lmdeploy_serving.py", *argv], device="dipu (import ditorch: cuda -> dipu)",
                  dtype="float16", model=CONFIG, quick=args.quick,
                  ratio="LMDeploy tokens/s / transformers tokens/s (> 1: LMDeploy faster)")


if __name__ == "__main__":
    sys.exit(main())
