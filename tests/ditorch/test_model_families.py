"""Every model family of :mod:`ditorch.models` trains on dipu as on the CPU, and ``ditorch demo --model``.

Per family: 3 fp32 AdamW steps on dipu match the CPU run (losses and final parameters, float32 noise), every
parameter receives a gradient (InternVL's vision tower included), MoE routing reaches every expert and is the
CPU's; 2 bf16-autocast steps stay finite and close to the fp32 losses; OpAutoCompare over one fp32 step finds
no FAIL. A droplet fault proves the comparison can fail. The CPU runs are computed once per module.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pytest
import torch

from ditorch import cli, demo
from ditorch.models import FAMILIES, IGNORE, IMAGE_TOKEN_ID, ModelFamily, get_family, parameter_count
from torch_dipu.vendors import droplet

pytest.importorskip("transformers")

SEED = 0
STEPS = 3
SHAPE = dict(batch_size=2, seq_len=32)
#: float32 noise: the device's kernels may round differently from the CPU's.
FP32 = dict(rtol=1e-4, atol=1e-5)
MOE = {"qwen3_moe", "deepseek_v3"}
NAMES = list(FAMILIES)
LOSS_LINE = re.compile(r"^step\s+(\d+)/(\d+)\s+loss\s+(\S+)$", re.MULTILINE)


@dataclass
class Run:
    losses: torch.Tensor
    params: dict[str, torch.Tensor]
    #: MoE layer -> tokens routed to each expert, summed over the run.
    expert_tokens: dict[str, torch.Tensor] = field(default_factory=dict)
    aux_losses: list[float] = field(default_factory=list)
    #: Parameters whose gradient stayed zero (or None) through the whole run.
    without_grad: set[str] = field(default_factory=set)
    logits_dtype: torch.dtype | None = None


def train(family: ModelFamily, device: str, steps: int = STEPS, bf16: bool = False) -> Run:
    """``steps`` AdamW steps of ``family`` on ``device`` (under bf16 autocast when asked), recorded."""
    model = family.build(SEED).to(device)
    run = Run(torch.empty(0), {})

    def count(module: torch.nn.Module, args: tuple, name: str) -> None:
        routed = torch.bincount(args[1].reshape(-1).cpu(), minlength=module.num_experts)
        run.expert_tokens[name] = run.expert_tokens.get(name, 0) + routed

    for name, module in model.named_modules():
        if name.endswith("mlp.experts"):  # both MoE families call experts(hidden, top_k_index, top_k_weights)
            module.register_forward_pre_hook(lambda m, args, name=name: count(m, args, name))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    grads = {name: 0.0 for name, _ in model.named_parameters()}
    losses = []
    for step in range(steps):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            out = model(**family.batch(step, SEED, device, **SHAPE))
        optimizer.zero_grad()
        out.loss.backward()
        for name, p in model.named_parameters():
            grads[name] += 0.0 if p.grad is None else p.grad.abs().sum().item()
        optimizer.step()
        losses.append(out.loss.item())
        if getattr(out, "aux_loss", None) is not None:
            run.aux_losses.append(out.aux_loss.item())
        run.logits_dtype = out.logits.dtype
    run.losses = torch.tensor(losses)
    run.params = {name: p.detach().cpu() for name, p in model.named_parameters()}
    run.without_grad = {name for name, total in grads.items() if total == 0.0}
    return run


def assert_matches(run: Run, ref: Run) -> None:
    """Same losses and final parameters as ``ref`` within float32 noise."""
    torch.testing.assert_close(run.losses, ref.losses, **FP32)
    assert run.params.keys() == ref.params.keys()
    for name in run.params:
        torch.testing.assert_close(run.params[name], ref.params[name], **FP32, msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture(scope="module")
def cpu_runs() -> dict[str, Run]:
    return {name: train(family, "cpu") for name, family in FAMILIES.items()}


# -- the registry --------------------------------------------------------------------------------------

def test_registry_lists_the_seeds_families():
    assert NAMES == ["llama", "internlm3", "qwen2", "qwen3", "qwen3_moe", "internvl", "deepseek_v3"]
    for family in FAMILIES.values():
        assert family.description and "\n" not in family.description


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match=r"unknown model 'gpt5'; known models: llama, .*deepseek_v3"):
        get_family("gpt5")


def test_build_and_batch_are_deterministic():
    family = FAMILIES["internvl"]
    state = torch.random.get_rng_state()
    a, b = family.build(SEED), family.build(SEED)
    assert torch.equal(torch.random.get_rng_state(), state), "build changed the global random state"
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.lm_head.weight, family.build(SEED + 1).lm_head.weight)
    first, again, second = (family.batch(s, SEED, "cpu", **SHAPE) for s in (0, 0, 1))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["input_ids"], second["input_ids"])
    images = first["input_ids"] == IMAGE_TOKEN_ID
    assert images.sum(1).tolist() == [family.image_tokens] * 2 and family.image_tokens > 0
    assert (first["labels"][images] == IGNORE).all() and first["pixel_values"].shape == (2, 3, 32, 32)
    text = FAMILIES["llama"].batch(0, SEED, "cpu", **SHAPE)
    assert set(text) == {"input_ids", "labels"} and text["input_ids"].shape == (2, 32)


def test_families_are_tiny_and_keep_their_structure():
    for name, family in FAMILIES.items():
        model = family.build(SEED)
        config = model.config.get_text_config()
        assert config.hidden_size <= 128 and config.num_hidden_layers == 2 and config.vocab_size == 1000, name
        assert parameter_count(model) < 1_000_000, name
    qwen3_moe = FAMILIES["qwen3_moe"].build(SEED).config
    assert (qwen3_moe.num_experts, qwen3_moe.num_experts_per_tok, qwen3_moe.output_router_logits) == (8, 2, True)
    deepseek = FAMILIES["deepseek_v3"].build(SEED).config
    assert deepseek.q_lora_rank and deepseek.kv_lora_rank and deepseek.first_k_dense_replace == 1
    assert (deepseek.n_routed_experts, deepseek.num_experts_per_tok) == (8, 2)
    assert FAMILIES["llama"].build(SEED).config.num_key_value_heads == 2


# -- training on dipu ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_fp32_training_matches_cpu(name, cpu_runs):
    ref = cpu_runs[name]
    run = train(FAMILIES[name], "dipu")
    assert torch.isfinite(run.losses).all()
    assert run.losses[-1] < run.losses[0] - 0.5, f"loss did not fall: {run.losses.tolist()}"
    assert_matches(run, ref)
    assert not run.without_grad, f"parameters without a gradient: {sorted(run.without_grad)}"
    assert bool(run.expert_tokens) == (name in MOE)
    for layer, tokens in run.expert_tokens.items():
        assert (tokens > 0).all(), f"{layer}: experts without tokens: {tokens.tolist()}"
        assert torch.equal(tokens, ref.expert_tokens[layer]), f"{layer}: routing differs from the CPU's"
    if name == "qwen3_moe":  # the router's load-balancing loss is part of the loss
        assert len(run.aux_losses) == STEPS and all(math.isfinite(x) for x in run.aux_losses)
        torch.testing.assert_close(torch.tensor(run.aux_losses), torch.tensor(ref.aux_losses), **FP32)


def test_the_comparison_fails_on_a_wrong_device(cpu_runs):
    with droplet.switches(faults="mm:bias:0.01"):
        faulty = train(FAMILIES["qwen3_moe"], "dipu")
    with pytest.raises(AssertionError):
        assert_matches(faulty, cpu_runs["qwen3_moe"])


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_training(name, cpu_runs):
    run = train(FAMILIES[name], "dipu", steps=2, bf16=True)
    assert run.logits_dtype == torch.bfloat16, "autocast did not reach the model"
    assert torch.isfinite(run.losses).all()
    torch.testing.assert_close(run.losses, cpu_runs[name].losses[:2], rtol=5e-2, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_autocompare_finds_no_fail(name, tmp_path):
    from op_tools import OpAutoCompare

    family = FAMILIES[name]
    model = family.build(SEED).to("dipu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    checker = OpAutoCompare(device="dipu", results_dir=tmp_path)
    with checker:
        loss = model(**family.batch(0, SEED, "dipu", **SHAPE)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    counts = checker.counts
    assert counts.get("FAIL", 0) == 0, checker.failures[:3]
    assert counts.get("PASS", 0) >= 500, counts


# -- ditorch demo --model / --list-models --------------------------------------------------------------

def test_list_models(capsys):
    assert cli.main(["demo", "--list-models"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    for line, family in zip(lines, FAMILIES.values(), strict=True):
        assert line.endswith(family.description)


def test_demo_trains_a_moe_model(capsys):
    assert cli.main(["demo", "--model", "qwen3_moe", "--steps", "2", "--device", "dipu"]) == 0
    out = capsys.readouterr().out
    assert "model: tiny Qwen3-MoE" in out
    steps = LOSS_LINE.findall(out)
    assert [(int(s), int(n)) for s, n, _ in steps] == [(1, 2), (2, 2)], out
    assert all(math.isfinite(float(v)) for _, _, v in steps)
    assert out.strip().splitlines()[-1].startswith("done: device dipu, 2 steps")


def test_demo_unknown_model(capsys):
    assert cli.main(["demo", "--model", "gpt5", "--steps", "1"]) == demo.EXIT_USAGE
    err = capsys.readouterr().err  # one line naming the value and the known families
    assert "invalid choice: 'gpt5'" in err and "deepseek_v3" in err and err.count("\n") == 1


def test_demo_fault_rehearsal_on_a_vision_model(tmp_path, capsys):
    assert demo.run(model="internvl", steps=1, device="dipu", fault="linear:bias:0.5", results_dir=tmp_path) == 0
    out = capsys.readouterr().out
    assert "first FAIL: torch.nn.functional.linear forward" in out, out
