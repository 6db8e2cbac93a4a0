"""The loss-debugging workflow of the seeds on tiny Llama and Qwen2 models: a faulty droplet operator makes
the loss drift away from the CPU's; forcing that operator to the CPU fallback brings the two back together.

Training every model family of the seeds' list on dipu against the CPU (fp32, bf16 autocast, OpAutoCompare) is
tests/ditorch/test_model_families.py.
"""

from __future__ import annotations

import pytest
import torch

import torch_dipu
from torch_dipu.vendors import droplet

transformers = pytest.importorskip("transformers")

STEPS = 10
SEED = 0
VOCAB = 1000
SIZES = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
MODELS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
}


def make_model(kind: str) -> torch.nn.Module:
    config_cls, model_cls = MODELS[kind]
    torch.manual_seed(SEED)
    return model_cls(config_cls(**SIZES))


def make_batches(steps: int = STEPS, batch: int = 2, seq_len: int = 32) -> list[torch.Tensor]:
    """A random 8-token pattern repeated at random phases: learnable, so the loss falls quickly."""
    gen = torch.Generator().manual_seed(SEED)
    pattern = torch.randint(0, VOCAB, (8,), generator=gen)
    positions = torch.arange(seq_len)
    return [pattern[(positions + torch.randint(0, 8, (batch, 1), generator=gen)) % 8] for _ in range(steps)]


def train(kind: str, device: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Losses of STEPS AdamW steps and the final parameters (on the CPU)."""
    model = make_model(kind).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for ids in make_batches():
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses), {name: p.detach().cpu() for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def cpu_runs() -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    return {kind: train(kind, "cpu") for kind in MODELS}


@pytest.fixture
def clean_device():
    """No leftover fallback list around a test that changes it."""
    torch_dipu.set_force_fallback([])
    yield
    torch_dipu.set_force_fallback([])


@pytest.mark.parametrize("kind", list(MODELS))
def test_fault_diverges_and_fallback_restores(kind, cpu_runs, clean_device):
    cpu_losses, _ = cpu_runs[kind]
    with droplet.switches(faults="mm:bias:0.01"):
        faulty, _ = train(kind, "dipu")
        assert not torch.allclose(faulty, cpu_losses, rtol=1e-4, atol=1e-5), (
            f"an mm fault left the losses unchanged: {faulty.tolist()}")
        torch_dipu.set_force_fallback(["mm"])
        repaired, _ = train(kind, "dipu")
    assert "mm" in torch_dipu.fallback_ops()
    torch.testing.assert_close(repaired, cpu_losses, rtol=1e-4, atol=1e-5)
