"""The transformers adaptor end to end: greedy generation of a left-padded batch over a paged cache (block size
4, shuffled free blocks) equals stock ``generate()`` for five tiny families on CPU and dipu, bf16 logits within
the noise floor, the mask registration carries the padding, uninstall restores stock exactly, bad input fails
with one-line errors, sampling and the int8 KV cache run."""

from __future__ import annotations

import copy

import pytest
import torch
from dlinfer_tiny_models import FAMILIES, PAD_ID, build, padded_prompts
from transformers.masking_utils import AttentionMaskInterface

import dlinfer
from diopi.compare import Verdict, compare_tensors
from dlinfer.framework import transformers as dlinfer_tf
from dlinfer.framework.transformers.compat import cache_kwarg
from dlinfer.registry import registry

NEW_TOKENS = 16
MOE = ("qwen3_moe", "mixtral")
GEN = dict(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=PAD_ID)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/dlinfer/conftest.py


@pytest.fixture(scope="module")
def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    return padded_prompts((7, 4), seed=3)


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    return {name: build(name, seed=0) for name in FAMILIES}


@pytest.fixture(scope="module")
def stock(models, prompts) -> dict[str, torch.Tensor]:
    ids, mask = prompts
    with torch.no_grad():
        return {name: m.generate(input_ids=ids, attention_mask=mask, **GEN) for name, m in models.items()}


def _generate_installed(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, **options) -> torch.Tensor:
    dlinfer_tf.install(model, **options)
    try:
        dlinfer.reset_counts()
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, **GEN)
    finally:
        dlinfer_tf.uninstall(model)


def _on(device: str) -> str:
    if device == "dipu":
        import torch_dipu  # noqa: F401  (registers the dipu device)
    return device


def _expected_ops(name: str) -> set[str]:
    ops = {"fill_kv_cache", "prefill_attention", "paged_decode_attention", "rms_norm", "add_rms_norm",
           "apply_rotary_pos_emb"}
    return ops | ({"moe_gating_topk_softmax", "fused_moe"} if name in MOE else {"silu_and_mul"})


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_padded_batch_equals_stock_on_cpu(name, models, prompts, stock):
    ids, mask = prompts
    out = _generate_installed(models[name], ids, mask, block_size=4, shuffle_seed=11)
    counts = dlinfer.op_counts()
    assert torch.equal(out, stock[name]), f"{name}: {out[:, -NEW_TOKENS:].tolist()} != {stock[name].tolist()}"
    assert _expected_ops(name) <= set(counts), f"{name}: ops that ran: {counts}"
    layers = models[name].config.num_hidden_layers
    assert counts["fill_kv_cache"] == layers * NEW_TOKENS  # one prefill and 15 decode steps per layer
    assert counts["prefill_attention"] == layers and counts["paged_decode_attention"] == layers * (NEW_TOKENS - 1)


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_padded_batch_equals_stock_on_dipu(name, models, prompts, stock):
    ids, mask = prompts
    model = copy.deepcopy(models[name]).to(_on("dipu"))
    out = _generate_installed(model, ids.to("dipu"), mask.to("dipu"), block_size=4, shuffle_seed=5)
    kernels = dlinfer.kernel_counts()
    assert out.device.type == "dipu"
    assert torch.equal(out.cpu(), stock[name]), f"{name} on dipu: {out.cpu().tolist()} != {stock[name].tolist()}"
    assert _expected_ops(name) <= {op for op, _ in kernels}
    # every op ran the kernel the registry serves for the dipu device (the vendor's where it registered one)
    for (op, kernel_name), _n in kernels.items():
        assert kernel_name == registry.kernel(op, out.device.type)[0], (op, kernel_name)


@pytest.mark.parametrize("device", ["cpu", "dipu"])
@pytest.mark.parametrize("name", FAMILIES)
def test_bf16_prompt_logits_within_noise_floor(name, device, models, prompts):
    """dlinfer in bf16 against stock fp32, judged by the noise-floor rule: stock bf16's own error against fp32
    is the floor (the logits of the real, non-padding prompt tokens)."""
    ids, mask = prompts
    real = mask.bool()
    with torch.no_grad():
        fp32 = models[name](ids, attention_mask=mask).logits[real]
        stock_bf16 = copy.deepcopy(models[name]).to(torch.bfloat16)(ids, attention_mask=mask).logits[real]
        model = copy.deepcopy(models[name]).to(torch.bfloat16).to(_on(device))
        dlinfer_tf.install(model, block_size=4, shuffle_seed=2)
        try:
            ours = model(ids.to(device), attention_mask=mask.to(device)).logits[real.to(device)]
        finally:
            dlinfer_tf.uninstall(model)
    assert ours.device.type == device
    result = compare_tensors(ours.cpu(), stock_bf16, expected_fp64=fp32.double())
    assert result.verdict in (Verdict.PASS, Verdict.PASS_NOISE), result.message


@pytest.mark.parametrize(("name", "device"), [("llama", "cpu"), ("qwen3_moe", "cpu"), ("qwen2", "dipu")])
def test_removing_the_mask_registration_breaks_the_padded_batch(name, device, models, prompts, stock):
    ids, mask = prompts
    model = models[name] if device == "cpu" else copy.deepcopy(models[name]).to(_on(device))
    dlinfer_tf.install(model, block_size=4, shuffle_seed=11)
    mask_fn = AttentionMaskInterface._global_mapping.pop("dlinfer")
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **GEN).cpu()
    finally:
        AttentionMaskInterface.register("dlinfer", mask_fn)
        dlinfer_tf.uninstall(model)
    # without the mask function the pads are cached and attended: the short (padded) prompt's tokens change
    assert not torch.equal(out[1], stock[name][1])
    assert torch.equal(out[0], stock[name][0])  # the unpadded prompt does not depend on the mask


@pytest.mark.parametrize("name", ["qwen3", "mixtral"])
def test_uninstall_restores_stock_exactly(name, models, prompts):
    ids, mask = prompts
    model = models[name]
    classes = [type(m) for m in model.modules()]
    attn = model.config._attn_implementation
    dlinfer_tf.install(model, block_size=4)
    assert model.config._attn_implementation == "dlinfer"
    assert any(type(m).__name__.startswith("Dlinfer") for m in model.modules())
    with torch.no_grad():
        model(ids, attention_mask=mask)
    dlinfer_tf.uninstall(model)
    dlinfer.reset_counts()
    with torch.no_grad():
        restored = model(ids, attention_mask=mask).logits
        never = build(name, seed=0)(ids, attention_mask=mask).logits
    assert dlinfer.op_counts() == {}
    assert torch.equal(restored, never)
    assert [type(m) for m in model.modules()] == classes and model.config._attn_implementation == attn
    assert "generate" not in model.__dict__ and not dlinfer_tf.installed(model)
    assert not model.model._forward_pre_hooks and not model.model._forward_hooks


def test_int8_kv_cache_generation_agrees_with_float_first(models, prompts):
    """The int8 cache (per token and head, asymmetric) changes the decode logits by about 1-2.5% of their
    largest magnitude (measured max abs error 0.045-0.113 on the first decode step); these prompts keep all 16
    greedy tokens, other prompts kept at least the first 3 in every family."""
    ids, mask = prompts
    scored = dict(GEN, output_scores=True, return_dict_in_generate=True)
    for name in FAMILIES:
        model = models[name]
        with torch.no_grad():
            ref = model.generate(input_ids=ids, attention_mask=mask, **scored)
            dlinfer_tf.install(model, block_size=4, shuffle_seed=1, kv_quant_bits=8)
            try:
                out = model.generate(input_ids=ids, attention_mask=mask, **scored)
            finally:
                dlinfer_tf.uninstall(model)
        decode_error = (out.scores[1] - ref.scores[1]).abs().max() / ref.scores[1].abs().max()
        assert decode_error < 0.05, (name, float(decode_error))
        new, expected = out.sequences[:, -NEW_TOKENS:], ref.sequences[:, -NEW_TOKENS:]
        assert torch.equal(new[:, :3], expected[:, :3]), (name, new.tolist(), expected.tolist())


def test_sampling_runs_and_gives_valid_tokens(models, prompts):
    ids, mask = prompts
    model = models["qwen2"]
    dlinfer_tf.install(model, block_size=4, shuffle_seed=3)
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=True, top_k=50,
                                 temperature=1.5, pad_token_id=PAD_ID)
    finally:
        dlinfer_tf.uninstall(model)
    new = out[:, ids.shape[1]:]
    assert new.shape == (2, 8) and int(new.min()) >= 0 and int(new.max()) < model.config.vocab_size


def test_prompt_longer_than_the_cache_is_refused(models, prompts):
    ids, mask = prompts
    model = models["llama"]
    dlinfer_tf.install(model, block_size=4, max_seq_len=20)
    try:
        with pytest.raises(ValueError, match=r"23 tokens \(prompt \+ max_new_tokens\) exceed .* max_seq_len 20"):
            model.generate(input_ids=ids, attention_mask=mask, **GEN)
    finally:
        dlinfer_tf.uninstall(model)


def test_block_pool_running_out_is_refused(models, prompts):
    ids, mask = prompts
    model = models["llama"]
    dlinfer_tf.install(model, block_size=4, num_blocks=5)  # prefill needs 2 + 1, the batch outgrows 5 at 12 tokens
    try:
        with pytest.raises(dlinfer_tf.BlockPoolExhausted, match="block pool exhausted"):
            model.generate(input_ids=ids, attention_mask=mask, **GEN)
    finally:
        dlinfer_tf.uninstall(model)
    assert not dlinfer_tf.installed(model)


def test_unsupported_head_layouts_are_refused():
    from transformers import DeepseekV3Config

    mla = torch.nn.Module()
    mla.config = DeepseekV3Config(hidden_size=64, num_attention_heads=4, kv_lora_rank=16, q_lora_rank=24)
    with pytest.raises(ValueError, match="multi-head latent attention"):
        dlinfer_tf.install(mla)
    model = build("llama", seed=1)
    model.model.layers[1].self_attn.q_proj = torch.nn.Linear(64, 4 * 8, bias=False)
    with pytest.raises(ValueError, match="LlamaAttention head_dim mismatch"):
        dlinfer_tf.install(model)
    assert not dlinfer_tf.installed(model)
    with pytest.raises(ValueError, match="kv_quant_bits must be 0 or 8"):
        dlinfer_tf.install(build("llama", seed=1), kv_quant_bits=4)


def test_a_generate_cache_reserves_each_sequence_consecutive_blocks(models):
    """generate()'s cache takes every sequence's blocks up front, in pool order (consecutive blocks, evenly spaced
    rows: the decode kernels read the cache in place); a shuffled pool or one smaller than the whole batch's length
    grows as the sequences do."""
    from dlinfer.reference.attention import _regular_rows

    model = models["llama"]
    for options, expected in (({}, {0: [0, 1, 2], 1: [3, 4, 5]}), ({"num_blocks": 5}, {}),
                              ({"shuffle_seed": 4}, None)):
        dlinfer_tf.install(model, block_size=4, **options)
        try:
            cache = dlinfer_tf.new_cache(model, batch_size=2, total_len=11)
        finally:
            dlinfer_tf.uninstall(model)
        tables = cache.manager.tables
        if expected is not None:
            assert tables == expected, options
        else:  # shuffled: all reserved, not consecutive
            assert sorted(sum(tables.values(), [])) == list(range(6))
            table = torch.tensor([tables[0], tables[1]], dtype=torch.int32)
            assert _regular_rows(table, 3) is None


def test_one_decode_step_by_hand_matches_the_model(models, prompts):
    """How to run one decode step outside ``forward`` (what a compiled decode step does): the bookkeeping
    (``prepare_step``) first, then the decoder layers read only the context's tensors."""
    ids, mask = prompts
    model = models["qwen3"]
    dlinfer_tf.install(model, block_size=4, shuffle_seed=4)
    try:
        with torch.no_grad():
            cache = dlinfer_tf.new_cache(model, batch_size=2, total_len=ids.shape[1] + 2)
            positions = mask.cumsum(-1) - 1  # what generate() passes for a left-padded batch
            first = model(ids, attention_mask=mask, position_ids=positions,
                          **{cache_kwarg(): cache}).logits[:, -1].argmax(-1, keepdim=True)
            twin = copy.deepcopy(cache)
            step_mask = torch.cat((mask, torch.ones_like(first)), 1)
            expected = model(first, attention_mask=step_mask, position_ids=step_mask.cumsum(-1)[:, -1:] - 1,
                             **{cache_kwarg(): twin}).logits
            # by hand
            base = model.model
            ctx = cache.prepare_step(1)                       # blocks, slots, lengths: outside the compiled part
            assert ctx.is_decoding and ctx.token_index is None
            hidden = base.embed_tokens(first)
            position_ids = (ctx.kv_seq_len - 1).long()[:, None]
            rotary = base.rotary_emb(hidden, position_ids=position_ids)
            for layer in base.layers:
                hidden = layer(hidden, attention_mask=ctx, position_embeddings=rotary, **{cache_kwarg(): cache})
            logits = model.lm_head(base.norm(hidden))
    finally:
        dlinfer_tf.uninstall(model)
    assert torch.equal(logits, expected)


def test_chunked_prefill_of_a_padded_batch_runs_paged_prefill_attention(models, prompts):
    """A prompt fed in two chunks: the second chunk attends to the cached first one through
    ``paged_prefill_attention``; its logits match stock's one-pass logits (fp32, noise floor from float64)."""
    ids, mask = prompts
    model = models["llama"]
    positions = mask.cumsum(-1) - 1
    real = mask.bool()[:, 4:]
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, position_ids=positions).logits[:, 4:][real]
        fp64 = copy.deepcopy(model).double()(ids, attention_mask=mask, position_ids=positions).logits[:, 4:][real]
        dlinfer_tf.install(model, block_size=4, shuffle_seed=6)
        try:
            cache = dlinfer_tf.new_cache(model, batch_size=2, total_len=ids.shape[1])
            model(ids[:, :4], attention_mask=mask[:, :4], position_ids=positions[:, :4], **{cache_kwarg(): cache})
            dlinfer.reset_counts()
            ours = model(ids[:, 4:], attention_mask=mask, position_ids=positions[:, 4:],
                         **{cache_kwarg(): cache}).logits[real]
        finally:
            dlinfer_tf.uninstall(model)
    assert dlinfer.op_counts()["paged_prefill_attention"] == model.config.num_hidden_layers
    assert cache.cached == [7, 4]
    result = compare_tensors(ours, expected, expected_fp64=fp64)
    assert result.verdict in (Verdict.PASS, Verdict.PASS_NOISE), result.message
