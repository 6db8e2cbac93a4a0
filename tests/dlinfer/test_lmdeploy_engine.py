"""LMDeploy's PyTorch engine on the device ``import ditorch`` maps ``cuda`` to (droplet's dipu here), through
dlinfer with nothing outside the project: greedy tokens equal transformers' ``generate()`` on the CPU for dense
and MoE models, a two-prompt batch crossing 16-token blocks, eager and graph mode, prefix caching; the counters
prove droplet's kernels ran, not the reference. Each engine runs in a fresh process (lmdeploy_serve.py) with
cuda mocking on, as a user runs it. Skipped when lmdeploy is not installed (CI's LMDeploy environment installs
it: .ci/lmdeploy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("lmdeploy", reason="lmdeploy is not installed (CI installs it: .ci/lmdeploy)")

from lmdeploy_models import save_tiny_model  # noqa: E402

HERE = Path(__file__).resolve().parent
NEW_TOKENS = 12
#: a 20-token prompt (crosses a 16-token block) and a 5-token one
PROMPTS = [[4 + (i * 7) % 250 for i in range(20)], [9, 10, 11, 12, 13]]
#: the operators droplet has kernels for that every dense/MoE Llama-like step calls
DROPLET_OPS = {"rms_norm", "add_rms_norm", "apply_rotary_pos_emb", "fill_kv_cache", "prefill_attention",
               "paged_decode_attention"}


def _stock(folder: Path) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for ids in PROMPTS:
            gen = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
            out.append(gen[0, len(ids):].tolist())
    return out


def _serve(folder: Path, eager: bool, prefix: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DITORCH_DISABLE_MOCK", "DLINFER_KERNELS")}
    cmd = [sys.executable, str(HERE / "lmdeploy_serve.py"), str(folder), "eager" if eager else "graph",
           "prefix" if prefix else "no-prefix", str(NEW_TOKENS), json.dumps(PROMPTS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"LMDeploy run failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _kernels(counts: dict[str, int], kernel: str) -> set[str]:
    return {key.split("/")[0] for key, n in counts.items() if n and key.endswith("/" + kernel)}


@pytest.mark.parametrize("family, eager, prefix", [
    ("llama", True, False),
    ("llama", False, True),
    ("qwen2", True, False),
    ("qwen2_moe", True, False),
])
def test_engine_tokens_equal_transformers(family, eager, prefix, tmp_path):
    folder = save_tiny_model(family, tmp_path / family)
    expected = _stock(folder)
    result = _serve(folder, eager, prefix)
    assert result["tokens"] == expected, f"{family} (eager={eager}): LMDeploy {result['tokens']} != {expected}"
    counts = result["counts"]
    missing = DROPLET_OPS - _kernels(counts, "droplet")
    assert not missing, f"droplet kernels did not run: {sorted(missing)} (counts {counts})"
    assert not _kernels(counts, "reference") & DROPLET_OPS, f"reference kernels ran where droplet has one: {counts}"
    if prefix:
        assert result["again"] == expected, f"{family} with prefix cache hits: {result['again']} != {expected}"
        assert result["again_counts"].get("paged_prefill_attention/droplet", 0) > 0, result["again_counts"]
    if family == "qwen2_moe":
        assert counts.get("moe_gating_topk_softmax/droplet", 0) > 0 and counts.get("fused_moe/reference", 0) > 0


def test_serving_benchmark_writes_its_json(tmp_path):
    out = tmp_path / "serving.json"
    bench = HERE.parents[1] / "benchmarks" / "bench_lmdeploy_serving.py"
    proc = subprocess.run([sys.executable, str(bench), "--quick", "--requests", "4", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["results"]
    assert row["requests"] == 4 and row["value"] > 0 and row["baseline"] > 0 and row["ratio"] > 0
    assert row["lmdeploy_kv_cache_mb"] > 0 and row["transformers_peak_kv_cache_mb"] > 0
    assert row["lmdeploy_peak_device_mb"] > 0 and isinstance(row["same_tokens"], bool)
