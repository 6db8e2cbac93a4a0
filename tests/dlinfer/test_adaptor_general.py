"""The general mechanism of the transformers adaptor: mask kinds judged from what the mask function computes, module
classes replaced only where the probe finds them equal to their own forward (per class and setting), supported()
reports, install() for every model constructed afterwards, stock attention modules over the paged cache."""

from __future__ import annotations

import pytest
import torch
from transformers import masking_utils
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm

import dlinfer
from dlinfer.framework import transformers as dlinfer_tf
from dlinfer.framework.transformers import construction, tiny_models
from dlinfer.framework.transformers.coverage import judge
from dlinfer.framework.transformers.mask import mask_window

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/dlinfer/conftest.py


def _generate(model: torch.nn.Module) -> torch.Tensor:
    ids, mask = tiny_models.prompts()
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
                              pad_token_id=tiny_models.PAD_ID)


def test_mask_kinds_are_judged_by_what_the_mask_function_computes():
    late = torch.arange(10, 13)  # queries at positions 10..12 over keys 0..12
    assert mask_window(masking_utils.causal_mask_function, 2, late, 13) is None
    sliding = masking_utils.sliding_window_causal_mask_function(4)
    assert mask_window(sliding, 2, late, 13) == 4
    assert mask_window(sliding, 2, torch.arange(0, 3), 3) is None  # no query sees past the window yet
    chunked = masking_utils.chunked_causal_mask_function(4, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="neither causal nor a causal sliding window"):
        mask_window(chunked, 2, late, 13)
    with pytest.raises(ValueError, match="neither causal nor a causal sliding window"):
        mask_window(masking_utils.bidirectional_mask_function, 2, late, 13)


def _verdicts(model_type: str) -> dict[str, tuple[str, str | None, str]]:
    report = dlinfer_tf.supported(tiny_models.build(model_type))
    assert report.refused is None, report.refused
    return {c.name: (c.kind, c.variant, c.reason) for c in report.classes}


def test_the_probe_picks_the_forward_a_class_computes():
    gemma = _verdicts("gemma")
    assert gemma["GemmaRMSNorm"][1] == "rms_norm (1 + weight)"  # x * (1 + w): the offset variant, not the plain
    assert gemma["GemmaDecoderLayer"][1] == "add_rms_norm"       # its post norm's offset goes into add_rms_norm
    phi3 = _verdicts("phi3")
    assert phi3["Phi3MLP"][1] == "silu_and_mul (fused gate_up)"
    olmo = _verdicts("olmo")
    assert not any(kind == "norm" for kind, _, _ in olmo.values())  # OLMo's LayerNorm has no weight: no candidate
    assert "OlmoDecoderLayer" not in olmo                           # so its layer is no add_rms_norm candidate
    gemma2 = _verdicts("gemma2")
    assert "Gemma2DecoderLayer" not in gemma2                       # four norms: not the pre-norm structure


def test_instances_of_a_class_with_other_settings_are_probed_apart():
    """Exaone-4's full-attention layers skip rotary and pass no window: same class as its sliding layers, but
    judged (and kept stock) on their own."""
    exaone = _verdicts("exaone4")
    assert exaone["Exaone4Attention[is_sliding=True]"][1] == "apply_rotary_pos_emb + dlinfer attention"
    kind, variant, reason = exaone["Exaone4Attention[is_sliding=False]"]
    assert variant is None and "sliding_window" in reason


class _DoubledNorm(LlamaRMSNorm):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(hidden_states)


class _ScaledResidualLayer(LlamaDecoderLayer):
    def forward(self, hidden_states: torch.Tensor, **kwargs: object) -> torch.Tensor:
        out = super().forward(hidden_states, **kwargs)
        return hidden_states + 0.5 * (out - hidden_states)


def test_a_class_that_differs_from_the_fused_forward_stays_stock_and_the_model_stays_equal():
    model = tiny_models.build("llama")
    model.model.norm.__class__ = _DoubledNorm
    for layer in model.model.layers:
        layer.__class__ = _ScaledResidualLayer
    expected = _generate(model)
    report = dlinfer_tf.supported(model)
    rows = {c.name: c for c in report.classes}
    assert rows["_DoubledNorm"].variant is None and "differs" in rows["_DoubledNorm"].reason
    assert rows["_ScaledResidualLayer"].variant is None and "differs" in rows["_ScaledResidualLayer"].reason
    assert rows["LlamaRMSNorm"].variant == "rms_norm"
    dlinfer_tf.install(model, block_size=4)
    try:
        assert type(model.model.norm) is _DoubledNorm and type(model.model.layers[0]) is _ScaledResidualLayer
        assert torch.equal(_generate(model), expected)
    finally:
        dlinfer_tf.uninstall(model)


@pytest.mark.parametrize("model_type", ["qwen3", "gemma2", "mistral"])
def test_a_head_dim_other_than_hidden_over_heads(model_type):
    """head_dim 24 with hidden 64 over 4 heads (Gemma's real ratio is 256 vs 3072 / 16): pools in the keys' own
    layout, the same tokens as stock (Gemma-2: with its soft-capping and alternating windows)."""
    model = tiny_models.build(model_type, head_dim=24)
    assert model.model.layers[0].self_attn.head_dim == 24 != model.config.hidden_size // 4
    expected = _generate(model)
    dlinfer_tf.install(model, block_size=4, shuffle_seed=7)
    try:
        assert torch.equal(_generate(model), expected)
    finally:
        dlinfer_tf.uninstall(model)


def test_a_stock_attention_module_runs_over_the_paged_cache():
    """GPT-NeoX's fused query_key_value attention is no candidate: it stays stock, hands its keys to
    PagedCache.update (given back unchanged) and calls the dlinfer attention function."""
    model = tiny_models.build("gpt_neox")
    expected = _generate(model)
    dlinfer_tf.install(model, block_size=4, shuffle_seed=2)
    try:
        dlinfer.reset_counts()
        out = _generate(model)
        counts = dlinfer.op_counts()
    finally:
        dlinfer_tf.uninstall(model)
    assert torch.equal(out, expected)
    assert counts["prefill_attention"] == 2 and counts["paged_decode_attention"] == 2 * 5


def test_supported_reports_a_refusal_and_leaves_the_model_stock():
    model = tiny_models.build("deepseek_v3")
    report = dlinfer_tf.supported(model)
    assert report.refused and "multi-head latent attention" in report.refused and not report.classes
    assert "refused: dlinfer: deepseek_v3 uses multi-head latent attention" in str(report)
    llama = tiny_models.build("llama")
    classes = [type(m) for m in llama.modules()]
    assert "LlamaAttention (attention, 2x): replaced by" in str(dlinfer_tf.supported(llama))
    assert [type(m) for m in llama.modules()] == classes and not dlinfer_tf.installed(llama)


def test_install_without_a_model_installs_every_model_constructed_afterwards():
    before = tiny_models.build("qwen3")
    expected = _generate(before)
    dlinfer_tf.install(block_size=4, shuffle_seed=5)
    try:
        model = tiny_models.build("qwen3")
        assert construction.armed(model) and not dlinfer_tf.installed(model)
        assert not construction.armed(model.model)  # the inner base model is not armed on its own
        assert not construction.armed(before)        # constructed before: untouched
        dlinfer.reset_counts()
        out = _generate(model)
        assert dlinfer_tf.installed(model) and not construction.armed(model)
        assert dlinfer.op_counts()["paged_decode_attention"] > 0
        assert torch.equal(out, expected)
    finally:
        dlinfer_tf.uninstall()
    assert not dlinfer_tf.installed(model) and not construction.enabled()
    assert not construction.armed(tiny_models.build("qwen3"))
    assert torch.equal(_generate(model), expected)


def test_install_without_a_model_refuses_at_first_use_in_one_line():
    dlinfer_tf.install()
    try:
        model = tiny_models.build("deepseek_v3")
        with pytest.raises(ValueError, match=r"^dlinfer: deepseek_v3 uses multi-head latent attention"):
            _generate(model)
    finally:
        dlinfer_tf.uninstall()


def test_a_judge_row_names_the_replaced_classes():
    row = judge("mistral")
    assert row.result == "equal", row
    assert "MistralAttention (attention)" in row.replaced and "MistralDecoderLayer (decoder)" in row.replaced


def test_nothing_holds_device_memory_after_the_model_is_gone():
    """The probe's recorded inputs, the per-step memos and the merged projections go with the model: after a
    dipu model is installed, generates, is uninstalled and freed, the device holds what it held before."""
    import gc

    from dlinfer_tiny_models import build, padded_prompts

    import torch_dipu  # noqa: F401
    from dlinfer.framework import transformers as dlinfer_tf

    gc.collect()
    before = torch.dipu.memory_allocated()
    model = build("llama", seed=0).to("dipu")
    ids, mask = padded_prompts((7, 4), seed=3)
    dlinfer_tf.install(model, block_size=4)
    with torch.no_grad():
        model.generate(input_ids=ids.to("dipu"), attention_mask=mask.to("dipu"), max_new_tokens=4, do_sample=False,
                       pad_token_id=0)
    dlinfer_tf.uninstall(model)
    del model, ids, mask
    gc.collect()
    assert torch.dipu.memory_allocated() == before
