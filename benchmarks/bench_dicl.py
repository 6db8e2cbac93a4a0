"""all_reduce bus bandwidth of dicl on dipu tensors vs gloo on CPU tensors, 2 processes, 4 KiB-64 MiB.

    python benchmarks/bench_dicl.py [--out FILE] [--nproc 2] [--sizes 4096,...] [--seconds 0.5]

Launches ``--nproc`` processes with torchrun; each size is all-reduced (SUM, float32) repeatedly for about
``--seconds`` on (a) dipu tensors in a ``dicl`` group, as shipped (the cross-rank call check on), (b) the same
with ``DICL_CHECK_COLLECTIVES`` off (the transport alone), (c) CPU tensors in a ``gloo`` group, the baseline.
Bus bandwidth follows nccl-tests: ``bytes * 2 (n - 1) / n / seconds``. Per case ``value`` is dicl's bus bandwidth
in GB/s, ``baseline`` gloo's on the CPU at the same size, ``ratio`` their quotient; ``unchecked_gbps`` is (b).
On droplet the transport is gloo on the storage tensors themselves (no staging copy), so the ratio measures
what dicl adds per call: the dispatch through the dipu tensor and the check's small allgather.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench_common import environment, torchrun_result, write_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dicl.json"
DEFAULT_SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def _time_all_reduce(tensor, seconds: float) -> float:  # noqa: ANN001
    """Median-free mean seconds per all_reduce over about ``seconds`` (after 2 warm-up calls), the same count on
    every rank (rank 0 decides and broadcasts it)."""
    import torch
    import torch.distributed as dist

    for _ in range(2):
        dist.all_reduce(tensor)
    start = time.perf_counter()
    dist.all_reduce(tensor)
    once = time.perf_counter() - start
    count = torch.tensor([max(3, min(200, int(seconds / max(once, 1e-6))))])
    dist.broadcast(count, src=0)  # CPU tensor: every group here carries host tensors too
    dist.barrier()
    start = time.perf_counter()
    for _ in range(int(count)):
        dist.all_reduce(tensor)
    return (time.perf_counter() - start) / int(count)


def worker(sizes: list[int], seconds: float, mode: str) -> None:
    """One rank of one mode (``dicl`` or ``gloo``); rank 0 prints ``RESULT {size: seconds}``."""
    import torch
    import torch.distributed as dist

    if mode == "dicl":
        import torch_dipu  # noqa: F401
    dist.init_process_group(mode)
    device = "dipu" if mode == "dicl" else "cpu"
    timings = {}
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        timings[size] = _time_all_reduce(tensor, seconds)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(timings), flush=True)
    dist.destroy_process_group()


def _launch(nproc: int, sizes: list[int], seconds: float, mode: str, env: dict[str, str]) -> dict[int, float]:
    result = torchrun_result(__file__, ["--worker", mode, "--sizes", ",".join(map(str, sizes)), "--seconds",
                                        str(seconds)], nproc, env=env)
    return {int(k): v for k, v in result.items()}


def bus_gbps(size: int, seconds: float, nproc: int) -> float:
    return size * 2 * (nproc - 1) / nproc / seconds / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="message sizes in bytes")
    parser.add_argument("--seconds", type=float, default=0.5, help="time spent per size and mode (about)")
    parser.add_argument("--worker", choices=["dicl", "gloo"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.worker:
        worker(sizes, args.seconds, args.worker)
        return 0
    checked = _launch(args.nproc, sizes, args.seconds, "dicl", {"DICL_CHECK_COLLECTIVES": "1"})
    unchecked = _launch(args.nproc, sizes, args.seconds, "dicl", {"DICL_CHECK_COLLECTIVES": "0"})
    gloo = _launch(args.nproc, sizes, args.seconds, "gloo", {})
    results = []
    for size in sizes:
        value, base = bus_gbps(size, checked[size], args.nproc), bus_gbps(size, gloo[size], args.nproc)
        # the ratio to 3 significant digits: it is often below 0.1, where 3 decimals would lose over 1%
        results.append({"case": f"all_reduce_{size}B", "value": round(value, 6), "baseline": round(base, 6),
                        "ratio": float(f"{value / base:.3g}"),
                        "unchecked_gbps": round(bus_gbps(size, unchecked[size], args.nproc), 6),
                        "dicl_us": round(checked[size] * 1e6, 1), "gloo_us": round(gloo[size] * 1e6, 1)})
        row = results[-1]
        print(f"{size:>9} B: dicl {row['value']:.3f} GB/s ({row['dicl_us']:.0f} us), unchecked "
              f"{row['unchecked_gbps']:.3f} GB/s, gloo on CPU {row['baseline']:.3f} GB/s ({row['gloo_us']:.0f} us), "
              f"ratio {row['ratio']:.2f}")
    payload = {"name": "dicl_all_reduce_bus_bandwidth", "unit": "GB/s", "results": results,
               "env": {**environment(), "nproc": args.nproc, "dtype": "float32", "op": "SUM"}}
    write_json(args.out, payload)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
