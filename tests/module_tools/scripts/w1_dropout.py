"""W1 (benchmarks/bench_common.W1: a 2-layer Llama, AdamW) with dropout on, written for CUDA as users write it.

Used by tests/module_tools/test_parity.py through ``ditorch parity``; ``python w1_dropout.py [steps]``.
"""

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

W1 = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2)


def main(steps: int) -> None:
    torch.manual_seed(1234)
    model = LlamaForCausalLM(LlamaConfig(**W1, attention_dropout=0.1, attn_implementation="sdpa"))
    model.model.embed_tokens = torch.nn.Sequential(model.model.embed_tokens, torch.nn.Dropout(0.1))
    model = model.cuda()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        ids = torch.randint(0, W1["vocab_size"], (2, 64), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
