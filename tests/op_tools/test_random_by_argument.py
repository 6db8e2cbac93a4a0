"""Calls random only by an argument (``F.scaled_dot_product_attention(..., dropout_p=0.1)``, as GPT-2 and BERT
call it in training) are treated as random ops: never compared by value, and run with the device's
generator under OpFallback, so a training run under the tools matches the plain one."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

import torch_dipu  # noqa: F401  (registers the dipu device)
from op_tools import OpAutoCompare, OpCapture, OpFallback
from op_tools.naming import draws_random, function_info

SDPA = "torch.nn.functional.scaled_dot_product_attention"


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 4, 8, 16, generator=g).to("dipu") for _ in range(3))


def test_dropout_probability_decides_whether_a_call_is_random() -> None:
    info = function_info(F.scaled_dot_product_attention)
    q = torch.zeros(1)
    assert draws_random(info, (q, q, q), {"dropout_p": 0.1})
    assert draws_random(info, (q, q, q, None, 0.1), {})
    assert not draws_random(info, (q, q, q), {})
    assert not draws_random(info, (q, q, q), {"dropout_p": 0.0})
    assert draws_random(function_info(F.dropout), (q,), {"p": 0.0})  # random by its name
    assert draws_random(function_info(F.fractional_max_pool2d), (q, 2), {})  # random pooling regions


def test_autocompare_skips_sdpa_with_dropout_and_compares_it_without(tmp_path: Path) -> None:
    q, k, v = _qkv()
    with OpAutoCompare(ops=SDPA, results_dir=tmp_path, report=False) as tool:
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        F.scaled_dot_product_attention(q, k, v)
    verdicts = [(r["verdict"], r.get("message", "")) for r in tool.results]
    assert verdicts[0] == ("SKIP", "random op"), verdicts
    assert [v for v, _ in verdicts[1:]] == ["PASS"], verdicts
    assert tool.counts.get("FAIL", 0) == 0


def _gpt2_losses(tool: object | None, steps: int = 2) -> list[float]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64)).to("dipu")
    assert model.training and model.config.attn_pdrop > 0  # attention dropout through sdpa's dropout_p
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(0)).to("dipu")
    losses = []
    if tool is not None:
        tool.start()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if tool is not None:
        tool.stop()
    return losses


def test_gpt2_training_under_fallback_of_every_op_matches_the_plain_run(tmp_path: Path) -> None:
    """Every op on the CPU, random ones drawing from the device generator: the losses are bitwise those of
    the plain run (sdpa's attention dropout included)."""
    plain = _gpt2_losses(None)
    tool = OpFallback(ops=".*", results_dir=tmp_path)
    assert _gpt2_losses(tool) == plain
    assert any(r["name"] == SDPA for r in tool.results)


def test_capture_records_sdpa_with_dropout_as_random(tmp_path: Path) -> None:
    q, k, v = _qkv()
    with OpCapture(ops=SDPA, results_dir=tmp_path):
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        F.scaled_dot_product_attention(q, k, v)
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.rglob("case.json"),
                                                         key=lambda p: int(p.parent.name))]
    assert [r["random"] for r in records] == [True, False]
