"""The library parity scenarios of ``tests/ditorch/test_libraries.py``, written the way a CUDA user writes them.

    python run_scenarios.py --mode cpu|ditorch --out DIR [--scenarios trainer_fp32,generate,...]

The two modes run this same file; the only difference is the one-line switch: ``--mode ditorch`` does
``import ditorch`` right after ``import torch``. Everything else is plain CUDA-style code: the device is
``"cuda" if torch.cuda.is_available() else "cpu"``, models go there with ``.to(device)``, the pipeline gets
``device=0`` when CUDA is available, and Trainer and accelerate choose their device themselves. On a machine
without CUDA the ``cpu`` mode is the CPU reference; under ditorch "cuda" is the vendor's device.

Writes ``DIR/results.json``: ``{"mode", "versions", "scenarios": {name: result}}`` where a result is either a
dict of plain values (losses, flags, device types, token ids, ...) or ``{"error": ..., "traceback": ...}`` when
the scenario raised; a scenario's tensors (final parameters, logits) go to ``DIR/<name>.safetensors`` on the CPU.
Each scenario is independent and catches its own exception, so one failure does not hide the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--mode", choices=("cpu", "ditorch"), required=True)
parser.add_argument("--out", type=Path, required=True, help="directory for results.json and the tensors")
parser.add_argument("--scenarios", default="", help="comma-separated names (default: all)")
ARGS = parser.parse_args()

import torch  # noqa: E402

if ARGS.mode == "ditorch":
    import ditorch  # noqa: E402, F401  (the one-line switch: "cuda" is the vendor's device from here on)

from safetensors.torch import save_file  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

device = "cuda" if torch.cuda.is_available() else "cpu"  # CUDA-written: "cuda" when there is one
OUT: Path = ARGS.out
VOCAB, SEQ, STEPS = 128, 16, 6


# ----------------------------------------------------------------------------------------------- building blocks
def tiny_llama(seed: int = 0, **overrides):
    """A 2-layer Llama (hidden 32, vocab 128) from a config, weights drawn from a fixed seed on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, **overrides)
    return LlamaForCausalLM(config)


class TokenData(Dataset):
    """Synthetic, learnable token data: arithmetic progressions modulo 120 (offset 3 past the special ids)."""

    def __init__(self, n: int = 48, seed: int = 1234):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, 120, (n, 1), generator=g)
        stride = torch.randint(1, 7, (n, 1), generator=g)
        self.ids = (start + stride * torch.arange(SEQ)) % 120 + 3

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i].clone()}


def probe_batch() -> torch.Tensor:
    return TokenData(n=2, seed=99).ids


def cpu_state(module: torch.nn.Module, prefix: str = "params/") -> dict[str, torch.Tensor]:
    return {prefix + k: v.detach().float().cpu().contiguous() for k, v in module.state_dict().items()}


def device_type(module: torch.nn.Module) -> str:
    return next(module.parameters()).device.type


def save_tensors(name: str, tensors: dict[str, torch.Tensor]) -> str:
    path = OUT / f"{name}.safetensors"
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path))
    return path.name


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


# ----------------------------------------------------------------------------------------------- Trainer
def trainer_args(out: Path, **overrides):
    from transformers import TrainingArguments

    settings = dict(output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=4, learning_rate=1e-2,
                    lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to="none",
                    disable_tqdm=True, seed=0, dataloader_num_workers=0,
                    use_cpu=not torch.cuda.is_available())  # Trainer wants it said for bf16 on the CPU
    settings.update(overrides)
    return TrainingArguments(**settings)


def train(out: Path, resume: str | None = None, optimizers=None, **overrides) -> tuple[dict, dict]:
    """One Trainer run; returns (values, tensors)."""
    from transformers import Trainer

    model = tiny_llama()
    if optimizers == "user":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))
        optimizers = (optimizer, scheduler)
    trainer = Trainer(model=model, args=trainer_args(out, **overrides), train_dataset=TokenData(),
                      optimizers=optimizers or (None, None))
    trainer.train(resume_from_checkpoint=resume)
    history = trainer.state.log_history
    values = {
        "losses": [h["loss"] for h in history if "loss" in h],
        "steps": [h["step"] for h in history if "loss" in h],
        "global_step": trainer.state.global_step,
        "args_device": str(trainer.args.device),
        "n_gpu": trainer.args.n_gpu,
        "wrapped": type(trainer.model_wrapped).__name__,
        "param_device": device_type(trainer.model),
        "mixed_precision": trainer.accelerator.mixed_precision,
        "native_amp": trainer.accelerator.native_amp,
        "grad_scaler": trainer.accelerator.scaler is not None,
    }
    return values, cpu_state(trainer.model)


def trainer_run(name: str, **overrides) -> dict:
    values, tensors = train(OUT / name, **overrides)
    values["tensors"] = save_tensors(name, tensors)
    return values


def scenario_trainer_fp32(name):
    return trainer_run(name)


def scenario_trainer_bf16(name):
    return trainer_run(name, bf16=True)


def scenario_trainer_fp16(name):
    return trainer_run(name, fp16=True)


def scenario_trainer_grad_accum(name):
    return trainer_run(name, per_device_train_batch_size=2, gradient_accumulation_steps=2)


def scenario_trainer_grad_ckpt(name):
    return trainer_run(name, gradient_checkpointing=True)


def scenario_trainer_user_optimizer(name):
    return trainer_run(name, optimizers="user")


def scenario_trainer_resume(name):
    """Train STEPS with a checkpoint at step 3; resume a fresh Trainer from it; both must end the same."""
    out = OUT / name
    full, full_tensors = train(out, save_strategy="steps", save_steps=3)
    checkpoint = out / "checkpoint-3"
    resumed, resumed_tensors = train(OUT / f"{name}_resumed", resume=str(checkpoint), save_strategy="steps",
                                     save_steps=3)
    tensors = {**full_tensors, **{k.replace("params/", "resumed/"): v for k, v in resumed_tensors.items()}}
    return {**full, "checkpoint_files": sorted(p.name for p in checkpoint.iterdir()),
            "resumed": resumed, "tensors": save_tensors(name, tensors)}


# ----------------------------------------------------------------------------------------------- accelerate
def accelerate_loop(state_dir: Path, save_at: int | None = None, resume_at: int | None = None) -> tuple[dict, dict]:
    """accelerate's documented loop: prepare(model, optimizer, dataloader), accelerator.backward, save/load_state."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    set_seed(0)
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    dataloader = DataLoader(TokenData(), batch_size=4, shuffle=True)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    batches, step = dataloader, 0
    if resume_at is not None:
        accelerator.load_state(str(state_dir))
        batches, step = accelerator.skip_first_batches(dataloader, resume_at), resume_at
    losses = []
    model.train()
    for batch in batches:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        step += 1
        if step == save_at:
            accelerator.save_state(str(state_dir))
        if step == STEPS:
            break
    values = {"losses": losses, "device": str(accelerator.device), "param_device": device_type(model),
              "batch_device": batch["input_ids"].device.type}
    return values, cpu_state(accelerator.unwrap_model(model))


def scenario_accelerate(name):
    state_dir = OUT / name / "state"
    full, full_tensors = accelerate_loop(state_dir, save_at=3)
    saved = sorted(p.name for p in state_dir.iterdir())
    resumed, resumed_tensors = accelerate_loop(state_dir, resume_at=3)
    tensors = {**full_tensors, **{k.replace("params/", "resumed/"): v for k, v in resumed_tensors.items()}}
    return {**full, "state_files": saved, "resumed": resumed, "tensors": save_tensors(name, tensors)}


# ----------------------------------------------------------------------------------------------- peft
def scenario_peft_lora(name):
    """A LoRA adapter trained a few steps, saved, reloaded onto a fresh base, merged: the same outputs."""
    from peft import LoraConfig, PeftModel, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                        task_type="CAUSAL_LM")
    model = get_peft_model(tiny_llama(), config).to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for batch in DataLoader(TokenData(n=16), batch_size=4):
        loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    adapter_dir = OUT / name / "adapter"
    model.save_pretrained(adapter_dir)
    probe = probe_batch().to(device)
    model.eval()
    with torch.no_grad():
        trained = model(probe).logits
        with model.disable_adapter():
            base = model(probe).logits
        reloaded_model = PeftModel.from_pretrained(tiny_llama().to(device), adapter_dir).to(device).eval()
        reloaded = reloaded_model(probe).logits
        merged_model = reloaded_model.merge_and_unload()
        merged = merged_model(probe).logits
    return {
        "losses": losses,
        "param_device": device_type(model),
        "adapter_files": sorted(p.name for p in adapter_dir.iterdir()),
        "reloaded_param_device": device_type(reloaded_model),
        "merged_type": type(merged_model).__name__,
        "adapter_vs_base": max_diff(trained, base),
        "reloaded_vs_trained": max_diff(reloaded, trained),
        "merged_vs_reloaded": max_diff(merged, reloaded),
        "tensors": save_tensors(name, {"logits/trained": trained, "logits/reloaded": reloaded,
                                       "logits/merged": merged, **cpu_state(merged_model)}),
    }


# ----------------------------------------------------------------------------------------------- from_pretrained
def scenario_from_pretrained(name):
    """save_pretrained (safetensors) from the device, from_pretrained back: onto the device, kept on the CPU, and
    with device_map; every copy gives the original logits."""
    from transformers import AutoModelForCausalLM

    model = tiny_llama(initializer_range=0.2).to(device).eval()  # large enough weights that positions matter
    probe = probe_batch()
    directory = OUT / name / "model"
    with torch.no_grad():
        original = model(probe.to(device)).logits
        model.save_pretrained(directory)
        onto_device = AutoModelForCausalLM.from_pretrained(directory).to(device).eval()
        on_device = onto_device(probe.to(device)).logits
        kept_on_cpu = AutoModelForCausalLM.from_pretrained(directory).eval()
        on_cpu = kept_on_cpu(probe).logits
        mapped = AutoModelForCausalLM.from_pretrained(directory, device_map=device).eval()
        device_mapped = mapped(probe.to(device)).logits
    return {
        "files": sorted(p.name for p in directory.iterdir()),
        "param_device": device_type(onto_device),
        "device_map_param_device": device_type(mapped),
        "reloaded_vs_original": max_diff(on_device, original),
        "cpu_kept_vs_original": max_diff(on_cpu, original),
        "device_map_vs_original": max_diff(device_mapped, original),
        "tensors": save_tensors(name, {"logits/original": original, "logits/reloaded": on_device,
                                       "logits/cpu_kept": on_cpu, "logits/device_map": device_mapped}),
    }


# ----------------------------------------------------------------------------------------------- generate
def left_padded_prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of different lengths, left-padded with pad id 0."""
    input_ids = torch.tensor([[17, 23, 29, 35, 41, 47], [0, 0, 0, 60, 61, 62]])
    return input_ids, (input_ids != 0).long()


def scenario_generate(name):
    """Greedy and sampled generate on a left-padded batch of two prompts; sampling twice from one seed."""
    model = tiny_llama(initializer_range=0.2).to(device).eval()
    input_ids, attention_mask = left_padded_prompts()
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    common = dict(attention_mask=attention_mask, max_new_tokens=8, pad_token_id=0)
    with torch.no_grad():
        greedy = model.generate(input_ids, do_sample=False, output_scores=True, return_dict_in_generate=True,
                                **common)
        scores = torch.stack(greedy.scores, 1).float()  # (batch, new tokens, vocab)
        top2 = scores.topk(2, dim=-1).values
        sampled = []
        for _ in range(2):
            torch.manual_seed(1)
            sampled.append(model.generate(input_ids, do_sample=True, top_k=0, temperature=1.0, **common))
    return {
        "greedy": greedy.sequences.tolist(),
        "greedy_min_margin": (top2[..., 0] - top2[..., 1]).min().item(),
        "sampled": sampled[0].tolist(),
        "sampled_again": sampled[1].tolist(),
        "output_device": greedy.sequences.device.type,
        "param_device": device_type(model),
        "tensors": save_tensors(name, {"scores/greedy": scores}),
    }


# ----------------------------------------------------------------------------------------------- pipeline
def char_tokenizer():
    """A character-level tokenizer built in code (no download): 4 specials, printable ASCII, fillers to 128."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens = ["<pad>", "<s>", "</s>", "<unk>"] + [chr(c) for c in range(32, 127)]
    tokens += [f"<x{i}>" for i in range(VOCAB - len(tokens))]
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", padding_side="left")


def scenario_pipeline(name):
    """pipeline("text-generation", model=..., tokenizer=..., device=0) on a batch of two prompts."""
    from transformers import pipeline

    tokenizer = char_tokenizer()
    model = tiny_llama(initializer_range=0.2)
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer,
                         device=0 if torch.cuda.is_available() else -1)
    outputs = generator(["hello world", "abc"], max_new_tokens=6, do_sample=False, batch_size=2)
    token_ids = [tokenizer(o[0]["generated_text"])["input_ids"] for o in outputs]
    return {"texts": [o[0]["generated_text"] for o in outputs], "token_ids": token_ids,
            "pipeline_device": str(generator.device), "param_device": device_type(generator.model)}


# ----------------------------------------------------------------------------------------------- driver
SCENARIOS = {name.removeprefix("scenario_"): fn for name, fn in globals().items() if name.startswith("scenario_")}


def versions() -> dict[str, str | None]:
    """Versions of the libraries under test (None: not installed; the test skips what needs it)."""
    import importlib

    found: dict[str, str | None] = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("transformers", "accelerate", "peft", "tokenizers", "safetensors"):
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError:
            found[name] = None
    if ARGS.mode == "ditorch":
        import torch_dipu

        found["ditorch_adapter"] = getattr(ditorch.adapter, "name", None)
        found["torch_dipu"] = getattr(torch_dipu, "__version__", None)
    return found


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    names = [n for n in ARGS.scenarios.split(",") if n.strip()] or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    results = {"mode": ARGS.mode, "device": device, "device_type": torch.empty(0, device=device).device.type,
               "versions": versions(), "scenarios": {}, "seconds": {}}
    path = OUT / "results.json"
    for name in names:
        start = time.perf_counter()
        try:
            results["scenarios"][name] = SCENARIOS[name](name)
        except Exception as e:  # report and go on with the next scenario
            tb = traceback.format_exc()
            results["scenarios"][name] = {"error": f"{type(e).__name__}: {e}", "traceback": tb[-4000:]}
            print(f"[{ARGS.mode}] {name}: {type(e).__name__}: {e}", file=sys.stderr)
        results["seconds"][name] = round(time.perf_counter() - start, 2)
        path.write_text(json.dumps(results, indent=1))  # after every scenario: a crash keeps what finished
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
