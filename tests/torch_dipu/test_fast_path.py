"""The compiled fast path (torch_dipu._fastpath: the dispatcher; torch_dipu._fastalloc: the allocator's hot
requests) gives what the Python path gives, call for call."""

from __future__ import annotations

import gc
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import torch_dipu
from torch_dipu import dispatch
from torch_dipu.tensor import _HANDLERS
from torch_dipu.vendors import droplet

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from test_allocator import allocator_in_use  # noqa: E402

from bench_common import w1_step  # noqa: E402

pytestmark = pytest.mark.skipif(dispatch._fastpath is None and shutil.which("cc") is None,
                                reason="no C compiler: the fast path was not built")


@pytest.fixture
def paths() -> Iterator[Callable[[Callable[[], Any]], tuple[Any, Any]]]:
    """``run_both(fn)``: ``fn()`` on the Python path, then on the fast path (which stays on afterwards)."""
    def run_both(fn: Callable[[], Any]) -> tuple[Any, Any]:
        assert not dispatch.set_fast_path(False)
        slow = fn()
        assert dispatch.set_fast_path(True)
        return slow, fn()

    yield run_both
    dispatch.set_fast_path(True)


def describe(value: Any) -> Any:
    """Everything a caller can see of a result: type, device, metadata, values, the storage shared with the input."""
    if isinstance(value, torch.Tensor):
        return (type(value).__name__, str(value.device), value.dtype, tuple(value.shape), value.stride(),
                value.storage_offset(), value.is_conj(), value.is_neg(), value.resolve_conj().resolve_neg().cpu())
    if isinstance(value, (tuple, list)):
        return type(value).__name__, [describe(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_built_and_in_use_where_a_compiler_exists() -> None:
    assert dispatch._fastpath is not None, "setup.py builds torch_dipu._fastpath wherever a C compiler exists"
    assert dispatch.fast_path_in_use()
    x = torch.ones(3, device="dipu")
    x + x
    handler = _HANDLERS[id(torch.ops.aten.add.Tensor)]
    assert type(handler).__name__ == "FastHandler" and dispatch.plain_handler(handler).__name__ == "handler"


CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "compute": lambda x: x.add(x).mul(2.5),
    "scalar and host scalar tensor": lambda x: x * torch.tensor(3.0) + 1,
    "views": lambda x: (x.t(), x[1:, ::2], x.view(-1), x.expand(2, 4, 4), x.unsqueeze(0).transpose(0, 2)),
    "conjugate view": lambda x: torch.complex(x, x).conj(),
    "negative view": lambda x: torch.complex(x, -x).conj()._neg_view(),
    "several outputs": lambda x: (x.max(dim=1), x.sort(dim=0), torch.std_mean(x, dim=0)),
    "non-tensor output": lambda x: (x.sum().item(), x.is_nonzero() if x.numel() == 1 else x.dim()),
    "in-place and out=": lambda x: (x.clone().add_(1), torch.add(x, x, out=torch.empty_like(x))),
    "keyword arguments": lambda x: (torch.sum(x, dim=0, keepdim=True), x.to(torch.float64), x.new_zeros(2)),
    "autograd": lambda x: torch.autograd.grad((x.requires_grad_().sin() * x).sum(), x),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_results_equal_the_python_path(paths, case: str) -> None:
    base = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    slow, fast = paths(lambda: describe(CASES[case](base.to("dipu"))))
    assert same(slow, fast)


def test_errors_equal_the_python_path(paths) -> None:
    def messages() -> list[str]:
        out = []
        x = torch.ones(2, 2, device="dipu")
        for bad in (lambda: x + torch.ones(2, 2), lambda: x.mm(torch.ones(3, 3, device="dipu")),
                    lambda: torch.ones(2, 2) + x):
            with pytest.raises(RuntimeError) as info:
                bad()
            out.append(str(info.value))
        return out

    slow, fast = paths(messages)
    assert slow == fast and "move the cpu tensor to dipu:0" in fast[0]


def test_several_devices_take_the_python_path(paths, four_dipu_devices) -> None:
    def mixed() -> str:
        with pytest.raises(RuntimeError) as info:
            torch.ones(2, device="dipu:0") + torch.ones(2, device="dipu:1")
        return str(info.value)

    slow, fast = paths(mixed)
    assert slow == fast and "dipu:0 and dipu:1" in fast


def test_profiler_ranges_and_memory_figures_equal_the_python_path(paths) -> None:
    def run() -> tuple[list[str], dict[str, int]]:
        x = torch.ones(64, 64, device="dipu")
        torch.dipu.reset_peak_memory_stats()
        with torch.profiler.profile() as prof:
            y = x.mm(x).relu()
        del y
        stats = torch.dipu.memory_stats()
        return [e.name for e in prof.events() if not e.name.startswith("PythonSubclass")], {
            k: v for k, v in stats.items() if k.endswith((".current", ".peak"))}

    (slow_names, slow_stats), (fast_names, fast_stats) = paths(run)
    assert slow_names == fast_names and "diopiMm" in fast_names
    assert slow_stats == fast_stats


def test_faults_and_call_counting_see_every_call(paths) -> None:
    def run() -> tuple[dict[str, int], torch.Tensor]:
        x = torch.ones(3, device="dipu")
        with torch_dipu.count_function_calls() as counts:
            x + x
            x.t()
            x * x
        with droplet.switches(faults="add.Tensor:bias"):
            faulted = (x + x).cpu()
        return dict(counts), faulted

    slow, fast = paths(run)
    assert slow[0] == fast[0] and fast[0]["diopiAdd"] == 1
    assert torch.equal(slow[1], fast[1]) and not torch.equal(fast[1], torch.full((3,), 2.0))


def test_an_error_inside_backward_is_kept_on_both_paths(paths, run_python) -> None:
    code = """
import torch, torch_dipu
from torch_dipu import dispatch
from torch_dipu.vendors import droplet
print("FAST", dispatch.fast_path_in_use())
x = torch.randn(64, 256, device="dipu", requires_grad=True)
loss = (x.sin() * 2).sum()
torch.dipu.empty_cache()
droplet.configure(memory_capacity=torch.dipu.memory_reserved() + 512)
try:
    loss.backward()
except RuntimeError as e:
    print("ERROR", str(e).replace("\\n", " "))
print("KEPT", type(torch_dipu.backward_errors()[-1]).__name__)
"""
    for flag, expected in (("0", "FAST False"), ("1", "FAST True")):
        out = run_python(code, env={"DIPU_FAST_PATH": flag}).stdout
        assert expected in out and "failed during backward: OutOfMemoryError" in out and "KEPT OutOfMemoryError" in out


def test_w1_losses_equal_the_python_path_and_the_cpu(paths) -> None:
    def losses(device: str) -> list[float]:
        step = w1_step(device)
        return [step() for _ in range(3)]

    slow, fast = paths(lambda: losses("dipu"))
    assert slow == fast == losses("cpu")


@pytest.mark.parametrize("algorithm", ["BF", "BS", "RAW"])
def test_allocator_figures_equal_the_python_path(paths, algorithm: str) -> None:
    def run() -> tuple[list[float], list[dict[str, int]], list[dict], bool]:
        with allocator_in_use(algorithm) as alloc:
            step = w1_step("dipu")
            losses, stats = [], []
            for _ in range(3):
                losses.append(step())
                stats.append(alloc.stats(0))
            snapshot = [  # block addresses as offsets in their segment (the vendor gives each allocator new ones)
                {**seg, "address": None,
                 "blocks": [{**b, "address": b["address"] - seg["address"]} for b in seg["blocks"]]}
                for seg in alloc.snapshot()]
            compiled = alloc._tracker is not None
            del step
            gc.collect()
            stats.append(alloc.stats(0))
        return losses, stats, snapshot, compiled

    run()  # the first steps of a process differ (claims trace their backward once): both paths see later ones
    slow, fast = paths(run)
    assert (slow[3], fast[3]) == (False, dispatch._fastalloc is not None)
    assert slow[0] == fast[0]
    assert slow[1] == fast[1] and slow[2] == fast[2]  # every statistic, peak and block, step by step
    end = fast[1][-1]
    assert end["allocated_bytes.all.current"] == end["allocation.all.current"] == 0  # every storage died and was freed
    assert end["allocation.all.allocated"] == end["allocation.all.freed"] > 500


def test_allocator_tracks_storages_made_by_several_threads(paths) -> None:
    def run() -> dict[str, int]:
        with allocator_in_use("BF") as alloc:
            def work(seed: int) -> None:
                x = torch.randn(64, generator=torch.Generator().manual_seed(seed)).to("dipu")
                for i in range(300):
                    x = (x + 1).mul(0.5) if i % 3 else torch.cat([x[:32], x[32:]])

            threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            gc.collect()
            return alloc.stats(0)

    slow, fast = paths(run)
    for stats in (slow, fast):
        assert stats["allocation.all.current"] == stats["allocated_bytes.all.current"] == 0
        assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] >= 4 * 300
    assert slow["allocation.all.allocated"] == fast["allocation.all.allocated"]


def test_torch_compile_is_taught_about_the_compiled_dispatcher(run_python) -> None:
    code = """
import warnings
warnings.simplefilter("error")  # "cannot teach this torch's dynamo about dipu tensors" would fail here
import torch, torch_dipu
from torch_dipu import dispatch
from torch_dipu.compile_default import _dispatch_codes
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("dipu")
x = torch.randn(4, 8, device="dipu")
compiled = torch.compile(model, backend="aot_eager")
print("FAST", dispatch.fast_path_in_use(), "SKIPPED", "handler" in {c.co_name for c in _dispatch_codes()})
print("EQUAL", torch.equal(compiled(x).cpu(), model(x).cpu()))
"""
    for flag in ("1", "0"):
        out = run_python(code, env={"DIPU_FAST_PATH": flag}).stdout
        assert f"FAST {flag == '1'} SKIPPED True" in out and "EQUAL True" in out, out
