"""Data-parallel training of W1 on dipu over dicl against one process training on the whole batch.

    python -m torch.distributed.run --standalone --nproc_per_node N ddp_w1.py [CHECKS] [--out DIR]

CHECKS is a comma-separated subset of ``ddp,no_sync,checkpoint,fsdp`` (default: all):

- ``ddp``: W1 (benchmarks/bench_common.W1, a 2-layer Llama) wrapped in ``DistributedDataParallel`` with small
  buckets trains ``STEPS`` AdamW steps, each rank on its slice of the global batch. Rank ``r`` builds its model
  from seed ``r``: DDP's broadcast at construction must give every rank rank 0's parameters. The final
  parameters must equal those of one process training on the whole batch (the loss is the mean over the global
  batch in both: every rank holds the same number of tokens and DDP averages the gradients) and be bitwise
  equal across ranks; DDP must have used several buckets.
- ``no_sync``: gradient accumulation, each rank's slice in two micro-batches, the first under ``no_sync()``:
  after it the gradients differ across ranks (nothing was reduced), after the second they equal the whole
  batch's gradients of one process.
- ``checkpoint``: rank 0 saves the trained DDP module's state_dict (host copies, safetensors) into ``--out``;
  every rank loads it into a new model on dipu, which must equal the trained one bitwise.
- ``fsdp``: the same model sharded with FSDP2 (``fully_shard`` per decoder layer and at the root) trains
  ``FSDP_STEPS`` steps: its losses (mean over ranks) and full parameters must match the single process's.

Rank 0 computes the single-process reference itself (a model without DDP on the whole batch, after the
distributed part) and prints one line ``RESULT {json}``: per check ``[ok, detail]`` plus measured figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import torch_dipu  # noqa: F401  (registers dipu and dicl)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_common import W1  # noqa: E402

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
DEVICE = "dipu"
STEPS, FSDP_STEPS = 5, 3
GLOBAL_BATCH, SEQ = 4, 64
BUCKET_CAP_MB = 0.25  # W1's 2.2 MB of gradients in several buckets
#: The optimizers (``--optimizer``). SGD is the default of the checks: its update is linear in the gradient, so
#: float32 noise stays float32 noise and a gradient reduced wrongly (summed instead of averaged, in the wrong
#: bucket) moves the parameters by far more than the tolerance. AdamW (W1's optimizer) is invariant to the
#: gradient's scale (it cannot see a sum taken for a mean) and turns the rounding noise of near-zero gradients
#: into updates of up to lr * noise / eps (eps = 1e-8): measured 3.5e-6 on 4 processes, too close to 1e-5.
OPTIMIZERS = {"sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
              "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3)}
#: float32 tolerance against the single process (the gradients are summed in another order: per rank, then
#: across ranks). Measured with SGD: max abs difference about 1e-8 after 5 steps (printed in each detail).
RTOL = ATOL = 1e-5
CHOSEN = {"optimizer": "sgd"}  # --optimizer


def build(seed: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**W1)).to(DEVICE)


def global_batch() -> torch.Tensor:
    return torch.randint(0, W1["vocab_size"], (GLOBAL_BATCH, SEQ), generator=torch.Generator().manual_seed(7))


def my_slice(batch: torch.Tensor) -> torch.Tensor:
    return batch.chunk(WORLD)[RANK].to(DEVICE)


def flat(tensors) -> torch.Tensor:  # noqa: ANN001
    return torch.cat([t.detach().reshape(-1).cpu() for t in tensors])


def same_across_ranks(vector: torch.Tensor) -> bool:
    gathered = [torch.empty_like(vector) for _ in range(WORLD)]
    dist.all_gather(gathered, vector)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> list:
    """``[ok, detail]`` of ``torch.testing.assert_close`` at RTOL/ATOL, the max absolute difference in the detail."""
    diff = (actual.double() - expected.double()).abs().max().item() if actual.numel() else 0.0
    try:
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)
    except AssertionError as exc:
        return [False, f"{what}: max abs diff {diff:.3g}; {exc}"]
    return [True, f"{what}: max abs diff {diff:.3g}"]


def train(model: torch.nn.Module, ids: torch.Tensor, steps: int, snapshot_at: int | None = None) -> tuple:
    """Steps of the chosen optimizer (``--optimizer``, SGD by default) on ``ids``: (losses, flat parameters
    after ``snapshot_at`` steps or None)."""
    optimizer = OPTIMIZERS[CHOSEN["optimizer"]](model.parameters())
    losses, snapshot = [], None
    for step in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if step + 1 == snapshot_at:
            snapshot = flat(full(p) for p in model.parameters())
    return losses, snapshot


def full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def mean_over_ranks(losses: list[torch.Tensor]) -> list[float]:
    stacked = torch.stack(losses)
    dist.all_reduce(stacked, op=dist.ReduceOp.AVG)
    return stacked.cpu().tolist()


def run_ddp(out: dict, batch: torch.Tensor) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = build(seed=RANK)
    ddp = DDP(model, bucket_cap_mb=BUCKET_CAP_MB)
    out["ddp_broadcast"] = same_across_ranks(flat(model.parameters()))
    losses, _ = train(ddp, my_slice(batch), STEPS)
    out["ddp_losses"] = mean_over_ranks(losses)
    out["ddp_buckets"] = len(ddp.reducer._get_zeros_like_grad_buckets())
    params = flat(model.parameters())
    out["ddp_same_across_ranks"] = same_across_ranks(params)
    out["_ddp_params"] = params
    return ddp


def run_no_sync(out: dict, batch: torch.Tensor) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(build(seed=0), bucket_cap_mb=BUCKET_CAP_MB)
    first, second = my_slice(batch).chunk(2)
    with ddp.no_sync():
        (ddp(input_ids=first, labels=first).loss / 2).backward()
    out["no_sync_grads_differ_after_first"] = not same_across_ranks(flat(p.grad for p in ddp.parameters()))
    (ddp(input_ids=second, labels=second).loss / 2).backward()
    grads = flat(p.grad for p in ddp.parameters())
    out["no_sync_same_across_ranks"] = same_across_ranks(grads)
    out["_no_sync_grads"] = grads


def run_checkpoint(out: dict, ddp: torch.nn.Module, folder: Path) -> None:
    from safetensors.torch import load_file

    from diopi.case_format import write_tensors

    path = folder / "ddp_w1.safetensors"
    if RANK == 0:
        write_tensors(path, {k: v.detach().cpu() for k, v in ddp.module.state_dict().items()})
    dist.barrier()
    restored = build(seed=100)
    result = restored.load_state_dict({k: v.to(DEVICE) for k, v in load_file(str(path)).items()})
    loaded = flat(restored.parameters())
    ok = torch.equal(loaded, flat(ddp.module.parameters())) and not result.missing_keys
    out["checkpoint_round_trip"] = same_across_ranks(loaded) and ok


def run_fsdp(out: dict, batch: torch.Tensor) -> None:
    from torch.distributed.fsdp import fully_shard

    model = build(seed=0)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    losses, params = train(model, my_slice(batch), FSDP_STEPS, snapshot_at=FSDP_STEPS)
    out["fsdp_losses"] = mean_over_ranks(losses)
    out["fsdp_sharded"] = all(p.to_local().numel() < p.numel() for p in model.parameters() if p.numel() >= WORLD)
    out["_fsdp_params"] = params


def reference(out: dict, batch: torch.Tensor, checks: set[str]) -> dict:
    """One process, no DDP, the whole batch: losses, parameters after FSDP_STEPS and STEPS, first gradients."""
    model = build(seed=0)
    ids = batch.to(DEVICE)
    ref: dict = {}
    if "no_sync" in checks:
        model(input_ids=ids, labels=ids).loss.backward()
        ref["grads"] = flat(p.grad for p in model.parameters())
        model.zero_grad(set_to_none=True)
    losses, ref["params_fsdp"] = train(model, ids, STEPS, snapshot_at=FSDP_STEPS)
    ref["losses"] = [loss.item() for loss in losses]
    ref["params"] = flat(model.parameters())
    return ref


def judge(out: dict, ref: dict, checks: set[str]) -> dict:
    result: dict = {"world_size": [True, str(WORLD)]}
    if "ddp" in checks:
        result["ddp_params_equal_single_process"] = close(out["_ddp_params"], ref["params"], f"{STEPS} steps")
        result["ddp_losses_equal_single_process"] = close(torch.tensor(out["ddp_losses"]),
                                                          torch.tensor(ref["losses"]), "losses")
        result["ddp_params_same_across_ranks"] = [out["ddp_same_across_ranks"], "bitwise"]
        result["ddp_broadcast_at_construction"] = [out["ddp_broadcast"], "ranks built from different seeds"]
        result["ddp_several_buckets"] = [out["ddp_buckets"] > 1, f"{out['ddp_buckets']} buckets"]
    if "no_sync" in checks:
        result["no_sync_no_reduction_inside"] = [out["no_sync_grads_differ_after_first"], ""]
        result["no_sync_grads_equal_single_process"] = close(out["_no_sync_grads"], ref["grads"], "gradients")
        result["no_sync_grads_same_across_ranks"] = [out["no_sync_same_across_ranks"], "bitwise"]
    if "checkpoint" in checks:
        result["checkpoint_round_trip"] = [out["checkpoint_round_trip"], "bitwise, every rank"]
    if "fsdp" in checks:
        result["fsdp_losses_equal_single_process"] = close(torch.tensor(out["fsdp_losses"]),
                                                           torch.tensor(ref["losses"][:FSDP_STEPS]), "losses")
        result["fsdp_params_equal_single_process"] = close(out["_fsdp_params"], ref["params_fsdp"],
                                                           f"{FSDP_STEPS} steps")
        result["fsdp_parameters_sharded"] = [out["fsdp_sharded"], ""]
        if "ddp" in checks:
            result["fsdp_losses_equal_ddp"] = close(torch.tensor(out["fsdp_losses"]),
                                                    torch.tensor(out["ddp_losses"][:FSDP_STEPS]), "losses")
    result["figures"] = [True, json.dumps({"ref_losses": ref["losses"], "ddp_losses": out.get("ddp_losses"),
                                           "fsdp_losses": out.get("fsdp_losses")})]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checks", nargs="?", default="ddp,no_sync,checkpoint,fsdp")
    parser.add_argument("--out", type=Path, default=Path.cwd(), help="folder of the checkpoint file")
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default=CHOSEN["optimizer"])
    args = parser.parse_args()
    CHOSEN["optimizer"] = args.optimizer
    checks = {c for c in args.checks.split(",") if c}
    dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=120))
    batch = global_batch()
    out: dict = {}
    ddp = run_ddp(out, batch) if {"ddp", "checkpoint"} & checks else None
    if "no_sync" in checks:
        run_no_sync(out, batch)
    if "checkpoint" in checks:
        run_checkpoint(out, ddp, args.out)
    if "fsdp" in checks:
        run_fsdp(out, batch)
    if RANK == 0:
        print("RESULT " + json.dumps(judge(out, reference(out, batch, checks), checks)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
