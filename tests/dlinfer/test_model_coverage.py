"""The coverage table (docs/dlinfer_models.md, written by ``python -m dlinfer.framework.transformers.coverage``)
stays true: every family listed ``equal`` still generates stock's greedy tokens through the adaptor, on the CPU
(all of them) and on dipu (a spread of them); families the paged cache cannot hold are refused in one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dlinfer.framework import transformers as dlinfer_tf
from dlinfer.framework.transformers import coverage, tiny_models

TABLE = Path(__file__).resolve().parents[2] / "docs" / "dlinfer_models.md"
ROWS = coverage.read_table(TABLE)
EQUAL = [row.model_type for row in ROWS if row.result == "equal"]
#: every DIPU_STRIDE-th family of the equal list also runs on dipu (droplet); 1: all of them
DIPU_STRIDE = 1
#: families the issue names: they must stay equal
REQUIRED = ("llama", "mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
            "gemma3_text", "gpt_neox", "olmo")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/dlinfer/conftest.py


def test_the_table_lists_every_architecture_and_enough_equal_families():
    assert [row.model_type for row in ROWS] == list(tiny_models.architectures())
    assert len(EQUAL) >= 30, EQUAL
    assert set(REQUIRED) <= set(EQUAL), sorted(set(REQUIRED) - set(EQUAL))
    assert {row.result for row in ROWS} <= set(coverage.RESULTS)


@pytest.mark.parametrize("model_type", EQUAL)
def test_equal_family_still_equal_on_cpu(model_type):
    row = coverage.judge(model_type)
    assert row.result == "equal", f"{model_type}: {row.result} {row.detail}"


@pytest.mark.parametrize("model_type", EQUAL[::DIPU_STRIDE])
def test_equal_family_still_equal_on_dipu(model_type):
    import torch_dipu  # noqa: F401  (registers the dipu device)

    start = time.perf_counter()
    row = coverage.judge(model_type, device="dipu")
    assert row.result == "equal", f"{model_type} on dipu: {row.result} {row.detail}"
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize(("model_type", "reason"), [
    ("deepseek_v3", "multi-head latent attention (MLA: config.kv_lora_rank/q_lora_rank)"),
    ("bart", "BartAttention at model.decoder.layers.0.encoder_attn is cross-attention"),
    ("llama4_text", "chunked attention (config.attention_chunk_size)"),
    ("gpt_oss", "GptOssAttention.sinks: attention sinks"),
    # found by the trial forward install() runs
    ("diffllama", "DiffLlamaAttention changes the keys/values cache.update() handed back"),
    ("bloom", "BloomForCausalLM computes with the attention mask itself"),
    ("rwkv", "no layer called transformers' attention interface"),
])
def test_what_the_paged_cache_cannot_hold_is_refused_in_one_line(model_type, reason):
    model = tiny_models.build(model_type)
    with pytest.raises(ValueError) as info:
        dlinfer_tf.install(model)
    message = str(info.value)
    assert reason in message and "\n" not in message and message.startswith("dlinfer")
    assert not dlinfer_tf.installed(model)


def test_an_encoder_decoder_model_is_refused_in_one_line():
    from transformers import T5Config, T5ForConditionalGeneration

    model = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                                num_heads=4))
    with pytest.raises(ValueError, match=r"^dlinfer: t5 is an encoder-decoder model \(config.is_encoder_decoder\)"):
        dlinfer_tf.install(model)
