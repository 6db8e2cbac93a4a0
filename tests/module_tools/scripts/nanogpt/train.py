"""A nanoGPT-style training script (written here in nanoGPT's manner, not copied from it), with nanoGPT's
CUDA-only idioms kept as users write them: module-level ``torch.cuda`` queries choosing the dtype, ``device =
'cuda'``, autocast with a GradScaler, TF32 switches, pinned batches moved with ``non_blocking=True``, fused AdamW
on cuda, an evaluation before the first step, gradient accumulation, clipping after ``scaler.unscale_``.

Synthetic data (a deterministic uint16 token array), tiny sizes: a few iterations take seconds on a CPU.
Override any setting as nanoGPT's configurator does: ``python train.py --max_iters=4 --dropout=0.0``.
Used by tests/module_tools/test_parity_nanogpt.py through ``ditorch parity``.
"""

import os
import sys
import time
from ast import literal_eval
from contextlib import nullcontext

import numpy as np
import torch
from model import GPT, GPTConfig
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# settings (every one can be overridden from the command line: --key=value)
out_dir = 'out'
eval_interval = 4
log_interval = 1
eval_iters = 2
always_save_checkpoint = False
save_checkpoint = False  # write out_dir/ckpt.pt when the validation loss improves (after iteration 0)
# data
gradient_accumulation_steps = 2
batch_size = 4
block_size = 16
vocab_size = 64
# model
n_layer = 2
n_head = 2
n_embd = 32
dropout = 0.1
bias = True
# AdamW
learning_rate = 1e-3
max_iters = 6
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
# system
backend = 'nccl'
device = 'cuda'
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
compile = False
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
# -----------------------------------------------------------------------------
# the configurator: --key=value replaces a setting above, keeping its type


def _value(text):
    try:
        return literal_eval(text)
    except (SyntaxError, ValueError):
        return text  # a string


for arg in sys.argv[1:]:
    if not arg.startswith('--') or '=' not in arg:
        raise SystemExit(f"unknown argument {arg!r}: expected --key=value")
    key, value = arg[2:].split('=', 1)
    if key not in config_keys:
        raise SystemExit(f"unknown setting: {key}")
    value = _value(value)
    if type(value) is not type(globals()[key]) and not (isinstance(value, int) and type(globals()[key]) is float):
        raise SystemExit(f"{key}={value!r}: expected a {type(globals()[key]).__name__}")
    print(f"overriding: {key} = {value}")
    globals()[key] = value
config = {k: globals()[k] for k in config_keys}  # logged with checkpoints
# -----------------------------------------------------------------------------

ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    device = f'cuda:{ddp_local_rank}'
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
print(f"tokens per iteration: {tokens_per_iter}; dtype {dtype}")

if master_process and save_checkpoint:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = 'cuda' if 'cuda' in device else 'cpu'
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

# synthetic data: a token stream with structure to learn (each token mostly follows from the one before)
_stream = (np.arange(4096, dtype=np.int64) * 7 + np.arange(4096, dtype=np.int64) // 5) % vocab_size
train_data = _stream[:3584].astype(np.uint16)
val_data = _stream[3584:].astype(np.uint16)


def get_batch(split):
    data = train_data if split == 'train' else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    if device_type == 'cuda':
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


iter_num = 0
best_val_loss = 1e9
model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                  vocab_size=vocab_size, dropout=dropout)
model = GPT(GPTConfig(**model_args))
print(f"number of parameters: {model.get_num_params()}")
model.to(device)

scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)

if compile:
    print("compiling the model...")
    unoptimized_model = model
    model = torch.compile(model)

if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


X, Y = get_batch('train')
t0 = time.time()
raw_model = model.module if ddp else model
while True:
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses['val'] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses['val']
            if iter_num > 0 and save_checkpoint:
                checkpoint = {
                    'model': raw_model.state_dict(),
                    'optimizer': optimizer.state_dict(),
                    'model_args': model_args,
                    'iter_num': iter_num,
                    'best_val_loss': best_val_loss,
                    'config': config,
                }
                print(f"saving checkpoint to {out_dir}")
                torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))

    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch('train')  # the next batch, fetched while the device works
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")
    iter_num += 1
    if iter_num > max_iters:
        break

if ddp:
    destroy_process_group()
