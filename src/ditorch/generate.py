"""``ditorch generate``: greedy generation with a tiny model family or a local Hugging Face model, stock or on
dlinfer's ops (``--dlinfer``: the transformers adaptor with a paged KV cache), for a quick look.

A tiny family (:data:`ditorch.models.FAMILIES`, random weights) has no tokenizer: a prompt's UTF-8 bytes are its
token ids (:func:`encode`) and generated ids are shown with a byte-level decode (:func:`decode`, each id modulo
256), so the text is gibberish but the ids are comparable between runs. A local model directory is loaded with
``AutoTokenizer``/``AutoModelForCausalLM`` (``local_files_only=True``: nothing is downloaded).

>>> ditorch generate --model llama --prompt "Hello" --prompt "Hi there" --max-new-tokens 8 --dlinfer
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import torch

from diopi.env import ConfigError

__all__ = ["DTYPES", "GenerateError", "LoadedModel", "check_model", "check_prompts", "decode", "encode", "generate",
           "load_model", "run"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
DEFAULT_MAX_NEW_TOKENS = 16
DEFAULT_BLOCK_SIZE = 16
#: The pad id of the tiny families' left-padded batches (any id works: padded positions are masked).
PAD_ID = 0


class GenerateError(ConfigError):
    """Bad input to ``ditorch generate`` (the message names the option at fault); a
    :class:`~diopi.env.ConfigError`, so a ValueError."""


@dataclasses.dataclass
class LoadedModel:
    """A model ready for ``generate()`` and how to turn text into ids and back."""

    name: str
    model: torch.nn.Module
    tokenizer: Any  # None for a tiny family (byte-level ids)
    pad_id: int

    def encode(self, prompts: Sequence[str], device: torch.device) -> dict[str, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` of ``prompts``, left-padded to one batch on ``device``."""
        rows = [self.tokenizer(p)["input_ids"] if self.tokenizer is not None else encode(p) for p in prompts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                ids[i, width - len(row):] = torch.tensor(row)
                mask[i, width - len(row):] = 1
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ``ids`` (the tokenizer's, or the byte-level decode)."""
        if self.tokenizer is not None:
            return self.tokenizer.decode(list(ids), skip_special_tokens=True)
        return decode(ids)


def encode(text: str) -> list[int]:
    """A tiny family's token ids of ``text``: its UTF-8 bytes (every family's vocabulary has more than 256 ids)."""
    return list(text.encode("utf-8"))


def decode(ids: Sequence[int]) -> str:
    """Byte-level decode of ``ids`` (each id modulo 256; invalid UTF-8 becomes U+FFFD)."""
    return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")


def check_model(name: str) -> None:
    """:class:`GenerateError` unless ``name`` is a text-only tiny family or a directory (checked before any work)."""
    from ditorch.models import generate_model_problem

    problem = generate_model_problem(name)
    if problem is not None:
        raise GenerateError(problem)


def load_model(name: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
               seed: int = 0) -> LoadedModel:
    """Tiny family ``name`` (random weights of ``seed``) or the local Hugging Face model directory ``name``, in
    eval mode on ``device`` in ``dtype``. :class:`GenerateError` for anything else."""
    from ditorch.models import FAMILIES

    check_model(name)
    family = FAMILIES.get(name)
    if family is not None:
        model = family.build(seed=seed)
        # random weights: never stop early at the config's EOS id, pad with PAD_ID
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = PAD_ID
        # the training families' router aux loss: not for inference, and stock transformers' generate() fails with
        # it on a left-padded batch (router logits of the new tokens against the full-length mask)
        model.config.output_router_logits = False
        return LoadedModel(name, model.to(device=device, dtype=dtype).eval(), None, PAD_ID)
    path = Path(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise GenerateError(f"--model {name!r}: cannot load a causal LM and its tokenizer from this directory: "
                            f"{str(exc).splitlines()[0]}") from exc
    tokenizer.padding_side = "left"
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad = 0 if pad is None else int(pad)
    model.generation_config.pad_token_id = pad
    return LoadedModel(name, model.to(device).eval(), tokenizer, pad)


@dataclasses.dataclass
class Generation:
    """The result of :func:`generate`: new ids per prompt, seconds taken, and the dlinfer op counts."""

    prompt_ids: list[list[int]]
    new_ids: list[list[int]]
    seconds: float
    op_counts: dict[str, int]

    @property
    def tokens_per_second(self) -> float:
        """New tokens (all prompts) per second of ``generate()``."""
        return sum(len(r) for r in self.new_ids) / self.seconds if self.seconds > 0 else float("inf")


def check_prompts(prompts: Sequence[str], byte_level: bool = True) -> None:
    """:class:`GenerateError` unless there is at least one prompt and, for a tiny family (``byte_level``: a
    prompt's bytes are its ids), none is empty; checked before any work."""
    if not prompts:
        raise GenerateError("--prompt: give at least one prompt")
    if byte_level and any(not p for p in prompts):
        raise GenerateError("--prompt: an empty prompt has no token to start from")


def generate(loaded: LoadedModel, prompts: Sequence[str], max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
             use_dlinfer: bool = False, block_size: int = DEFAULT_BLOCK_SIZE) -> Generation:
    """Greedy ``generate()`` of ``max_new_tokens`` for ``prompts`` (one left-padded batch), stock or with the
    dlinfer adaptor installed for the call (uninstalled afterwards)."""
    check_prompts(prompts, byte_level=False)
    if max_new_tokens < 1:
        raise GenerateError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    model = loaded.model
    device = next(model.parameters()).device
    batch = loaded.encode(prompts, device)
    if any(int(n) == 0 for n in batch["attention_mask"].sum(1)):
        raise GenerateError("--prompt: an empty prompt has no token to start from")
    counts: dict[str, int] = {}
    if use_dlinfer:
        import dlinfer
        from dlinfer.framework import transformers as dlinfer_tf

        try:
            dlinfer_tf.install(model, block_size=block_size)
        except ValueError as exc:  # a model type or head layout the adaptor does not take
            raise GenerateError(f"--dlinfer: {str(exc).removeprefix('dlinfer: ')}") from exc
        dlinfer.reset_counts()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        seconds = time.perf_counter() - start
        if use_dlinfer:
            counts = dict(sorted(dlinfer.op_counts().items()))
    finally:
        if use_dlinfer:
            dlinfer_tf.uninstall(model)
    width = batch["input_ids"].shape[1]
    mask = batch["attention_mask"].tolist()
    prompt_ids = [[t for t, m in zip(row, mrow, strict=True) if m] for row, mrow in
                  zip(batch["input_ids"].tolist(), mask, strict=True)]
    return Generation(prompt_ids, out[:, width:].tolist(), seconds, counts)


def run(model: str, prompts: Sequence[str], max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, use_dlinfer: bool = False,
        device: str | None = None, dtype: str = "float32", block_size: int = DEFAULT_BLOCK_SIZE,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The ``ditorch generate`` command: print each prompt's generated ids and text, tokens/s and, with
    ``use_dlinfer``, the dlinfer op counts. Returns the exit status (2: bad input, with one line on ``err``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if dtype not in DTYPES:
            raise GenerateError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        if block_size < 1:
            raise GenerateError(f"--block-size must be at least 1, got {block_size}")
        from ditorch.device import best_device, parse_device
        from ditorch.models import FAMILIES

        check_model(model)
        check_prompts(prompts, byte_level=model in FAMILIES)
        target = best_device(parse_device(device or "cpu", "--device"))
        loaded = load_model(model, target, DTYPES[dtype])
        result = generate(loaded, prompts, max_new_tokens, use_dlinfer, block_size)
    except ConfigError as exc:  # GenerateError, a bad --device
        print(f"ditorch generate: error: {exc}", file=err)
        return 2
    mode = f"dlinfer (block size {block_size})" if use_dlinfer else "stock transformers"
    print(f"model: {model} on {target}, {dtype}, {mode}", file=out)
    for i, (prompt, ids, new) in enumerate(zip(prompts, result.prompt_ids, result.new_ids, strict=True)):
        print(f"prompt {i}: {prompt!r} ids {ids}", file=out)
        print(f"generated {i}: ids {new}", file=out)
        print(f"text {i}: {loaded.decode(new)!r}", file=out)
    total = sum(len(r) for r in result.new_ids)
    print(f"tokens/s: {result.tokens_per_second:.1f} ({total} new tokens in {result.seconds:.3f} s)", file=out)
    if use_dlinfer:
        ops = ", ".join(f"{k}={v}" for k, v in result.op_counts.items()) or "none"
        print(f"dlinfer ops: {ops}", file=out)
    return 0
