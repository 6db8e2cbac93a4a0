"""DDP step time of W1 on dipu over dicl: 2 processes against 1, and the time spent in dicl collectives.

    python benchmarks/bench_ddp.py [--out FILE] [--rounds N] [--steps N] [--warmup N]

One ``torchrun --standalone --nproc_per_node 2`` launch of this script (``OMP_NUM_THREADS=1`` per process, as
torchrun sets it) runs, in interleaved rounds (the order rotates each round), ``--steps`` W1 training steps
(bench_common.W1 wrapped in ``DistributedDataParallel`` with its default buckets, AdamW, per-rank batch (2, 64),
a step as bench_common.w1_step: forward with labels, zero_grad, backward, optimizer step, ``loss.item()``) of:

- ``ddp2``: both processes, the default DDP reducer;
- ``ddp1``: rank 0 alone (DDP over a one-rank group, the same per-rank batch) while rank 1 waits: one process;
- ``plain1``: rank 0 alone without DDP;
- ``timed2``: both processes, each bucket's all-reduce done by a communication hook equal to DDP's default
  (divide by the world size, all_reduce SUM) that times the ``dist.all_reduce`` call: the dicl time per step
  (the cross-rank check of ``DICL_CHECK_COLLECTIVES`` included);
- ``timed2_nocheck``: the same with the check switched off.

Rows: ``w1_ddp_step_2proc`` (value: ms per step on 2 processes, baseline: 1 process, ratio: median of the
per-round ratios), ``w1_ddp_step_1proc`` (DDP on one process against no DDP), ``w1_dicl_ms_per_step_2proc``
(value: dicl ms per step, baseline: the step time of those rounds, ratio: dicl's share) and
``w1_dicl_ms_per_step_2proc_nocheck``. Writes one JSON file in the project's benchmark format.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import W1, finish, torchrun_result

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ddp.json"
KINDS = ("ddp2", "ddp1", "plain1", "timed2", "timed2_nocheck")
NPROC = 2
TIMEOUT = 600


class Run:
    """One W1 model on dipu (seed 0, per-rank data), DDP over ``group`` unless ``group`` is None."""

    def __init__(self, group: Any, timed: bool = False) -> None:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**W1)).to("dipu")
        self.module = model if group is None else DDP(model, process_group=group)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        rank = dist.get_rank()
        self.ids = torch.randint(0, W1["vocab_size"], (2, 64),
                                 generator=torch.Generator().manual_seed(rank)).to("dipu")
        self.collective_s: list[float] = []
        self.bytes = 0
        if timed:
            self.module.register_comm_hook(group, self._timed_allreduce)

    def _timed_allreduce(self, group, bucket):  # noqa: ANN001, ANN202  (DDP rejects annotations but its own)
        """DDP's default hook (divide by the world size, all_reduce SUM), with the all_reduce call timed."""
        import torch
        import torch.distributed as dist

        tensor = bucket.buffer()
        tensor.div_(group.size())
        start = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        self.collective_s.append(time.perf_counter() - start)
        self.bytes += tensor.numel() * tensor.element_size()
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(tensor)
        return future

    def step(self) -> float:
        loss = self.module(input_ids=self.ids, labels=self.ids).loss
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def buckets(self) -> int:
        reducer = getattr(self.module, "reducer", None)
        return len(reducer._get_zeros_like_grad_buckets()) if reducer is not None else 0


def worker(args: argparse.Namespace) -> None:
    """One rank: the rounds; rank 0 prints ``RESULT {json}``."""
    import torch
    import torch.distributed as dist

    import torch_dipu  # noqa: F401  (registers dipu and dicl)
    from torch_dipu.state import get_state

    dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=TIMEOUT))
    rank, world = dist.get_rank(), dist.get_world_size()
    alone = dist.new_group([0])  # every rank takes part in creating it
    runs = {"ddp2": Run(dist.group.WORLD), "timed2": Run(dist.group.WORLD, timed=True)}
    runs["timed2_nocheck"] = runs["timed2"]  # the same model; only the check differs
    if rank == 0:
        runs["ddp1"], runs["plain1"] = Run(alone), Run(None)
    config = get_state().config
    check = config.check_collectives

    def play(kind: str, steps: int) -> float | None:
        """``steps`` steps of ``kind`` (None on a rank that sits it out): seconds per step."""
        dist.barrier()
        if kind in ("ddp1", "plain1") and rank != 0:
            dist.barrier()
            return None
        config.check_collectives = check and kind != "timed2_nocheck"
        try:
            start = time.perf_counter()
            for _ in range(steps):
                runs[kind].step()
            elapsed = (time.perf_counter() - start) / steps
        finally:
            config.check_collectives = check
        dist.barrier()
        return elapsed

    for kind in KINDS:
        play(kind, args.warmup)
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    dicl: dict[str, list[float]] = {"timed2": [], "timed2_nocheck": []}
    timed = runs["timed2"]
    calls = nbytes = 0
    for r in range(args.rounds):
        order = KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]
        for kind in order:
            before, bytes_before = len(timed.collective_s), timed.bytes
            seconds = play(kind, args.steps)
            if seconds is not None:
                samples[kind].append(seconds * 1e3)
            if kind in dicl:
                dicl[kind].append(sum(timed.collective_s[before:]) * 1e3 / args.steps)
                calls = (len(timed.collective_s) - before) / args.steps
                nbytes = (timed.bytes - bytes_before) / args.steps
    if rank == 0:
        print("RESULT " + json.dumps({
            "samples": samples, "dicl": dicl, "world_size": world, "buckets": runs["ddp2"].buckets(),
            "allreduce_calls_per_step": calls, "allreduce_bytes_per_step": nbytes,
            "torch_threads": torch.get_num_threads(),
        }), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def launch(args: argparse.Namespace) -> dict:
    """Run the worker under torchrun; rank 0's result."""
    return torchrun_result(Path(__file__).resolve(), ["--worker", "--rounds", str(args.rounds), "--steps",
                                                      str(args.steps), "--warmup", str(args.warmup)], NPROC,
                           env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}, timeout=TIMEOUT)


def row(case: str, values: list[float], baselines: list[float], **extra: Any) -> dict:
    value, baseline = statistics.median(values), statistics.median(baselines)
    ratio = statistics.median(v / b for v, b in zip(values, baselines, strict=True))
    return {"case": case, "value": round(value, 3), "baseline": round(baseline, 3), "ratio": round(ratio, 3),
            "unit": "ms", **extra}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps of each kind")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    start = time.perf_counter()
    got = launch(args)
    s, dicl = got["samples"], got["dicl"]
    spread = {kind: [round(min(v), 3), round(max(v), 3)] for kind, v in s.items()}
    results = [
        row("w1_ddp_step_2proc", s["ddp2"], s["ddp1"], processes=[2, 1], per_rank_batch=[2, 64],
            buckets=got["buckets"], spread={"2proc": spread["ddp2"], "1proc": spread["ddp1"]}),
        row("w1_ddp_step_1proc", s["ddp1"], s["plain1"], note="DDP on one process (value) against no DDP "
            "(baseline)", spread={"ddp": spread["ddp1"], "plain": spread["plain1"]}),
        row("w1_dicl_ms_per_step_2proc", dicl["timed2"], s["timed2"], note="value: dicl all_reduce ms per step "
            "(cross-rank check included), baseline: step time of those rounds, ratio: dicl's share",
            allreduce_calls_per_step=got["allreduce_calls_per_step"],
            allreduce_bytes_per_step=got["allreduce_bytes_per_step"]),
        row("w1_dicl_ms_per_step_2proc_nocheck", dicl["timed2_nocheck"], s["timed2_nocheck"],
            note="the same with DICL_CHECK_COLLECTIVES off"),
    ]
    for r in results:
        print(f"{r['case']}: {r['value']:.3f} ms (baseline {r['baseline']:.3f} ms, ratio {r['ratio']:.3f})")
    return finish(args.out, "ddp", "ms", results, start, rounds=args.rounds, steps_per_round=args.steps,
                  warmup=args.warmup, processes=NPROC, worker_torch_threads=got["torch_threads"],
                  omp_num_threads=os.environ.get("OMP_NUM_THREADS", "1"))


if __name__ == "__main__":
    sys.exit(main())
