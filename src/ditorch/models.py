"""Tiny model families of the seeds' model list, built from transformers configs with seeded random weights.

Each :class:`ModelFamily` builds a 2-layer model (hidden <= 128, vocab 1000) that keeps its family's structure:
grouped-query attention, rotary embeddings, tied or untied embeddings as the family has them, MoE routing with
several experts and top-k > 1 (Qwen3-MoE, DeepSeek-V3), multi-head latent attention (DeepSeek-V3) and a vision
tower feeding image tokens into the language model (InternVL). Nothing is downloaded.

:meth:`ModelFamily.batch` gives the model's keyword arguments for one training step, labels included: a random
token pattern repeated at a random phase per row (learnable, so a correct device makes the loss fall within a
few steps), plus images for InternVL. Batches depend only on ``(seed, step)``.

>>> family = get_family("qwen3_moe")
>>> model = family.build(seed=0)
>>> loss = model(**family.batch(step=0, seed=0, device="cpu")).loss
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a model is built: the command line lists the families without it
    import torch

__all__ = ["BATCH_SIZE", "FAMILIES", "SEQ_LEN", "VOCAB_SIZE", "ModelFamily", "generate_model_problem", "get_family",
           "parameter_count"]

VOCAB_SIZE = 1000
#: The demo's batch; tests pass smaller ones to :meth:`ModelFamily.batch`.
BATCH_SIZE = 4
SEQ_LEN = 64
#: The demo's defaults (``ditorch demo``; here, beside the batch, so the command line shows them without torch).
DEFAULT_MODEL = "llama"
DEFAULT_STEPS = 10
DEFAULT_SEED = 0
DEFAULT_LR = 1e-3
PATTERN_LEN = 8
#: InternVL's image: 32x32 pixels in 8x8 patches (16 patches), pixel-shuffled 2x2 into 4 image tokens.
IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2 // 4
#: The token id standing for an image feature in InternVL's text (never drawn for text).
IMAGE_TOKEN_ID = VOCAB_SIZE - 1
#: Label of the positions the loss ignores (transformers' ``ignore_index``).
IGNORE = -100

_DECODER = dict(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)


@dataclass(frozen=True)
class ModelFamily:
    """One model family: how to build its tiny model and its training batches.

    ``title`` names the model in one phrase (the demo prints it), ``description`` says in one line what the
    family exercises. ``image_tokens`` is the number of image tokens per sample (0: text only).
    """

    name: str
    title: str
    description: str
    make: Callable[[], torch.nn.Module]
    image_tokens: int = 0

    def build(self, seed: int = 0) -> torch.nn.Module:
        """The model with weights drawn from ``seed``, on the CPU (the global random state is left as it was)."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.make()

    def batch(self, step: int, seed: int = 0, device: torch.device | str = "cpu", batch_size: int = BATCH_SIZE,
              seq_len: int = SEQ_LEN) -> dict[str, torch.Tensor]:
        """The model's keyword arguments for training step ``step`` (``input_ids``, ``labels``, and
        ``pixel_values`` for a vision family), on ``device``; the same for the same ``(seed, step)``.

        Every row repeats one random ``PATTERN_LEN``-token pattern of ``seed``, from a random phase of the step.
        A vision family's rows start with the image tokens (label ``-100``), then ``seq_len`` text tokens.
        """
        import torch

        pattern = torch.randint(0, VOCAB_SIZE - 1, (PATTERN_LEN,), generator=torch.Generator().manual_seed(seed))
        generator = torch.Generator().manual_seed(seed * 100_003 + step + 1)
        phases = torch.randint(0, PATTERN_LEN, (batch_size, 1), generator=generator)
        text = pattern[(torch.arange(seq_len) + phases) % PATTERN_LEN]
        if not self.image_tokens:
            return {"input_ids": text.to(device), "labels": text.to(device)}
        images = torch.full((batch_size, self.image_tokens), IMAGE_TOKEN_ID)
        pixel_values = torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
        return {"input_ids": torch.cat((images, text), 1).to(device),
                "labels": torch.cat((torch.full_like(images, IGNORE), text), 1).to(device),
                "pixel_values": pixel_values.to(device)}


def parameter_count(model: torch.nn.Module) -> int:
    """The number of parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**_DECODER))


def _internlm3() -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, InternLM3Config

    # InternLM3-8B: Llama's architecture (built through the Auto class as from the hub), head_dim given
    # explicitly, rope_theta 5e7 with dynamic NTK scaling, untied embeddings.
    config = InternLM3Config(**_DECODER, head_dim=32, max_position_embeddings=256,
                             rope_parameters={"rope_type": "dynamic", "factor": 6.0, "rope_theta": 50_000_000.0})
    return AutoModelForCausalLM.from_config(config)


def _qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(**_DECODER, tie_word_embeddings=True))


def _qwen3() -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(**_DECODER, head_dim=32, tie_word_embeddings=True))


def _qwen3_moe() -> torch.nn.Module:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(**_DECODER, head_dim=32, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                            norm_topk_prob=True, output_router_logits=True, router_aux_loss_coef=0.01)
    return Qwen3MoeForCausalLM(config)


def _deepseek_v3() -> torch.nn.Module:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    # Layer 0 dense (first_k_dense_replace), layer 1 MoE: 8 routed experts in 2 groups (one group per token),
    # top-2, one shared expert. MLA: queries through a rank-48 LoRA, keys/values through a rank-32 latent.
    config = DeepseekV3Config(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, first_k_dense_replace=1,
        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
        q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    )
    return DeepseekV3ForCausalLM(config)


def _internvl() -> torch.nn.Module:
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=[IMAGE_SIZE, IMAGE_SIZE], patch_size=[PATCH_SIZE, PATCH_SIZE])
    text = dict(_DECODER, model_type="qwen2", tie_word_embeddings=True)
    config = InternVLConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN_ID,
                            image_seq_length=IMAGE_TOKENS, downsample_ratio=0.5)
    return InternVLForConditionalGeneration(config)


FAMILIES: dict[str, ModelFamily] = {family.name: family for family in (
    ModelFamily("llama", "tiny Llama (2 layers, hidden 128, vocab 1000)",
                "Llama: RMSNorm, rotary embeddings, GQA 4:2, SwiGLU MLP, untied embeddings", _llama),
    ModelFamily("internlm3", "tiny InternLM3 (2 layers, hidden 128, vocab 1000)",
                "InternLM3: Llama architecture via AutoModelForCausalLM, GQA 4:2, dynamic-NTK rope (theta 5e7)",
                _internlm3),
    ModelFamily("qwen2", "tiny Qwen2 (2 layers, hidden 128, vocab 1000)",
                "Qwen2: GQA 4:2 with q/k/v biases, rotary embeddings, tied embeddings", _qwen2),
    ModelFamily("qwen3", "tiny Qwen3 (2 layers, hidden 128, vocab 1000)",
                "Qwen3: GQA 4:2 with per-head q/k RMSNorm, rotary embeddings, tied embeddings", _qwen3),
    ModelFamily("qwen3_moe", "tiny Qwen3-MoE (2 MoE layers, 8 experts, top-2, hidden 128)",
                "Qwen3-MoE: every layer MoE (8 experts, top-2, grouped-mm experts), router aux loss, q/k norm",
                _qwen3_moe),
    ModelFamily("internvl", "tiny InternVL (2-layer vision tower + 2-layer Qwen2, hidden 128)",
                "InternVL: ViT (patches, CLS, layer scale) -> pixel shuffle -> MLP projector -> image tokens in Qwen2",
                _internvl, image_tokens=IMAGE_TOKENS),
    ModelFamily("deepseek_v3", "tiny DeepSeek-V3 (1 dense + 1 MoE layer, MLA, hidden 128)",
                "DeepSeek-V3: MLA (q/kv LoRA, rope/nope split), group-limited top-2 of 8 experts + shared expert",
                _deepseek_v3),
)}


def get_family(name: str) -> ModelFamily:
    """The family called ``name``; :class:`~diopi.env.ConfigError` (a ValueError) naming it and the known
    families otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        from diopi.env import ConfigError

        raise ConfigError(f"unknown model {name!r}; known models: {', '.join(FAMILIES)}") from None


def generate_model_problem(name: str) -> str | None:
    """Why ``name`` cannot be ``ditorch generate --model``'s value (a text-only family or a local model directory),
    in one line; None when it can."""
    from pathlib import Path

    family = FAMILIES.get(name)
    if family is not None and family.image_tokens:
        return (f"--model {name!r}: a vision family; generate takes text-only families "
                f"({', '.join(n for n, f in FAMILIES.items() if not f.image_tokens)})")
    if family is None and not Path(name).is_dir():
        return (f"--model {name!r}: neither a tiny model family ({', '.join(FAMILIES)}) nor a local Hugging Face "
                f"model directory")
    return None
