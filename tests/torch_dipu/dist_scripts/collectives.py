"""Every collective of torch.distributed on dipu tensors over dicl, against the same collective on CPU tensors.

Run under torchrun with 2 or more processes; rank 0 prints one JSON line ``{"collective": [ok, detail], ...}``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

if sys.argv[1:2] == ["nccl"]:
    import ditorch  # noqa: F401  (CUDA-written code: "nccl" maps to the device's backend)
import torch_dipu  # noqa: F401  (registers dipu and dicl)

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def data(*shape: int, dtype: torch.dtype = torch.float32, salt: int = 0) -> torch.Tensor:
    """Rank-dependent values, the same on every call with the same arguments."""
    g = torch.Generator().manual_seed(1000 * RANK + salt)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def both(run, *inputs: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """``run`` on dipu copies of ``inputs`` and on CPU copies; both results as CPU tensors."""
    results = []
    for device in ("dipu", "cpu"):
        out = run(*[t.clone().to(device) for t in inputs])
        results.append([o.cpu() for o in out])
    return results[0], results[1]


def all_reduce(op):
    def run(t):
        dist.all_reduce(t, op=op)
        return [t]
    return run


def average(t):  # gloo has no AVG: the CPU reference is SUM / world
    if t.device.type == "cpu":
        dist.all_reduce(t)
        return [t / WORLD]
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return [t]


def broadcast(t):
    dist.broadcast(t, src=WORLD - 1)
    return [t]


def reduce(t):
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    return [t] if RANK == 0 else []


def all_gather(t):
    outs = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(outs, t)
    return outs


def all_gather_into_tensor(t):
    out = torch.empty((WORLD * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
    dist.all_gather_into_tensor(out, t)
    return [out]


def reduce_scatter(t):
    out = torch.empty_like(t[0])
    dist.reduce_scatter(out, list(t.unbind(0)))
    return [out]


def reduce_scatter_tensor(t):
    out = torch.empty((t.shape[0] // WORLD, *t.shape[1:]), dtype=t.dtype, device=t.device)
    dist.reduce_scatter_tensor(out, t)
    return [out]


def all_to_all(t):
    outs = [torch.empty_like(c) for c in t.chunk(WORLD)]
    dist.all_to_all(outs, [c.contiguous() for c in t.chunk(WORLD)])
    return outs


def all_to_all_single(t):
    out = torch.empty_like(t)
    dist.all_to_all_single(out, t)
    return [out]


def all_to_all_uneven(t):
    # rank r sends r+1+i rows to rank i; receives r... the splits every rank agrees on
    send = [RANK + 1 + i for i in range(WORLD)]
    recv = [i + 1 + RANK for i in range(WORLD)]
    src = t[: sum(send)]
    out = torch.empty((sum(recv), *t.shape[1:]), dtype=t.dtype, device=t.device)
    dist.all_to_all_single(out, src, output_split_sizes=recv, input_split_sizes=send)
    return [out]


def send_recv(t):
    if RANK == 0:
        dist.send(t, dst=1)
        return []
    if RANK == 1:
        out = torch.empty_like(t)
        dist.recv(out, src=0)
        return [out]
    return []


def isend_irecv(t):
    if RANK == 0:
        dist.isend(t, dst=1).wait()
        return []
    if RANK == 1:
        out = torch.empty_like(t)
        dist.irecv(out, src=0).wait()
        return [out]
    return []


def async_all_reduce(t):
    work = dist.all_reduce(t, async_op=True)
    assert work.wait()
    return [t]


def gather(t):
    outs = [torch.empty_like(t) for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(t, outs, dst=0)
    return outs or []


def scatter(t):
    out = torch.empty_like(t[0])
    dist.scatter(out, list(t.unbind(0)) if RANK == 0 else None, src=0)
    return [out]


CASES = {
    "all_reduce_sum": (all_reduce(dist.ReduceOp.SUM), data(5, 3)),
    "all_reduce_avg": (average, data(5, 3)),
    "all_reduce_max": (all_reduce(dist.ReduceOp.MAX), data(7)),
    "all_reduce_min": (all_reduce(dist.ReduceOp.MIN), data(7)),
    "all_reduce_product": (all_reduce(dist.ReduceOp.PRODUCT), data(7)),
    "all_reduce_int64": (all_reduce(dist.ReduceOp.SUM), data(6, dtype=torch.int64)),
    "all_reduce_bf16": (all_reduce(dist.ReduceOp.SUM), data(6, dtype=torch.bfloat16)),
    "all_reduce_storage_offset": (lambda t: all_reduce(dist.ReduceOp.SUM)(t[1:]), data(4, 3)),
    "async_all_reduce": (async_all_reduce, data(8)),
    "broadcast": (broadcast, data(4, 2)),
    "reduce": (reduce, data(9)),
    "all_gather": (all_gather, data(3, 2)),
    "all_gather_into_tensor": (all_gather_into_tensor, data(3, 2)),
    "reduce_scatter": (reduce_scatter, data(WORLD, 5)),
    "reduce_scatter_tensor": (reduce_scatter_tensor, data(2 * WORLD, 3)),
    "all_to_all": (all_to_all, data(3 * WORLD, 2)),
    "all_to_all_single": (all_to_all_single, data(2 * WORLD, 3)),
    "all_to_all_single_uneven": (all_to_all_uneven, data(4 * WORLD, 2)),
    "send_recv": (send_recv, data(6)),
    "isend_irecv": (isend_irecv, data(6)),
    "gather": (gather, data(4)),
    "scatter": (scatter, data(WORLD, 3)),
}


def main() -> None:
    dist.init_process_group(sys.argv[1] if len(sys.argv) > 1 else "dicl")
    results = {}
    for name, (run, tensor) in CASES.items():
        if os.environ.get("DICL_TEST_VERBOSE"):
            print(RANK, name, flush=True)
        try:
            on_dipu, on_cpu = both(run, tensor)
            same = len(on_dipu) == len(on_cpu) and all(torch.equal(a, b) for a, b in zip(on_dipu, on_cpu, strict=True))
            results[name] = [same, "" if same else f"dipu {on_dipu} cpu {on_cpu}"]
        except Exception as exc:  # reported per collective
            results[name] = [False, f"{type(exc).__name__}: {exc}"]
            if os.environ.get("DICL_TEST_VERBOSE"):
                print(RANK, name, results[name], flush=True)
    barrier_ok = dist.barrier() is None
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, results)
    if RANK == 0:
        merged = {name: [all(r[name][0] for r in gathered), "; ".join(r[name][1] for r in gathered if r[name][1])]
                  for name in results}
        merged["barrier"] = [barrier_ok, ""]
        merged["backend"] = [dist.get_backend() == "dicl", dist.get_backend()]
        accelerator = torch.accelerator.current_accelerator()
        merged["default_backend_for_accelerator"] = [dist.get_default_backend_for_device(accelerator) == "dicl",
                                                     str(accelerator)]
        print("RESULT " + json.dumps(merged), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
