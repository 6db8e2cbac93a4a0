"""The CUDA idioms ``ditorch info --probe`` runs after the names (:mod:`ditorch.probe` states the contract).

Each idiom is a few lines of CUDA code as a user writes it (``"cuda"`` devices, ``.cuda()``, ``torch.cuda.*``),
tiny, and checked against the CPU: it returns a short detail, raises :class:`~ditorch.probe_checks.Wrong` where the
device answers differently, and lets ``NotSupportedOnDevice`` through (``unsupported``). ``uses`` names the
``torch.cuda`` names it calls: the idiom is ``native`` when all of them are the plugin's own.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ditorch.probe_checks import NBYTES, close, expect, on_device

__all__ = ["IDIOMS", "Idiom"]


@dataclass(frozen=True)
class Idiom:
    name: str
    check: Callable[[], str]
    uses: tuple[str, ...] = ()  # the torch.cuda names it calls
    compiles: bool = False  # needs the default torch.compile backend, which ditorch supplies on plugins


class MLP(nn.Module):
    """Linear, GELU, LayerNorm, Linear: every op has a backward."""

    def __init__(self, norm_first: bool = False, bias: bool = True) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32, bias=bias), nn.Linear(32, 8, bias=bias)
        self.norm = nn.LayerNorm(16 if norm_first else 32)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_first:  # autocast: normalise the float32 input, then the matmuls in low precision
            return self.fc2(F.gelu(self.fc1(self.norm(x))))
        return self.fc2(self.norm(F.gelu(self.fc1(x))))


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 16, generator=g), torch.randint(0, 8, (8,), generator=g)


def models(**kwargs: bool) -> tuple[MLP, MLP]:
    """The same model on the CPU and, copied with ``.cuda()``, on the device."""
    torch.manual_seed(0)
    cpu = MLP(**kwargs)
    return cpu, copy.deepcopy(cpu).cuda()


def train_step() -> str:
    cpu, dev = models()
    losses: dict[str, list[torch.Tensor]] = {}
    for model, device in ((cpu, "cpu"), (dev, "cuda")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x, y = batch(step)
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.setdefault(device, []).append(loss.detach().cpu())
    close(torch.stack(losses["cuda"]), torch.stack(losses["cpu"]), "the losses")
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        expect(on_device(q), f"{name} is on {q.device}")
        close(q, p, f"{name} after 3 steps")
    return f"3 SGD steps, losses {losses['cuda'][0]:.4f} .. {losses['cuda'][-1]:.4f} and parameters = the CPU's"


def amp() -> str:
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    cpu, dev = models(norm_first=True, bias=False)
    x, y = batch(0)
    with torch.autocast("cpu", dtype=dtype):
        ref = F.cross_entropy(cpu(x).float(), y)
    opt, scaler = torch.optim.SGD(dev.parameters(), lr=0.1), torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=dtype):
        out = dev(x.cuda())
        loss = F.cross_entropy(out.float(), y.cuda())
    expect(out.dtype == dtype, f"the output under autocast is {out.dtype}, not {dtype}")
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    expect(math.isfinite(loss.item()), f"the loss is {loss.item()}")
    close(loss, ref, f"the {dtype} autocast loss", rtol=2e-2, atol=1e-3)
    expect(math.isfinite(scaler.get_scale()), f"GradScaler's scale is {scaler.get_scale()}")
    pairs = zip(cpu.parameters(), dev.parameters(), strict=True)
    stepped = [not torch.equal(q.detach().cpu(), p.detach()) for p, q in pairs]
    expect(all(stepped), "GradScaler skipped the optimizer step")
    return f"{str(dtype)[6:]} autocast + GradScaler step, loss {loss.item():.4f} (CPU {ref.item():.4f})"


def pinned_loader() -> str:
    x, y = torch.arange(48, dtype=torch.float32).reshape(12, 4), torch.arange(12)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4, pin_memory=True)
    moved, pinned = [], []
    for xb, yb in loader:
        pinned.append(xb.is_pinned())
        moved.append((xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)))
    expect(all(on_device(t) for pair in moved for t in pair), "a batch did not land on the device")
    expect(torch.equal(torch.cat([a.cpu() for a, _ in moved]), x), "the batches' values differ")
    expect(torch.equal(torch.cat([b.cpu() for _, b in moved]), y), "the labels differ")
    return f"{len(moved)} batches, {'pinned' if all(pinned) else 'not pinned'}, equal after .cuda(non_blocking=True)"


def streams_events() -> str:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    ad, bd = a.cuda(), b.cuda()
    side = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        start.record()
        c = (ad @ bd).relu() + 1
        end.record()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    expect(end.query(), "an event recorded on the side stream is pending after synchronize()")
    ms = start.elapsed_time(end)
    expect(ms >= 0, f"elapsed_time {ms} ms")
    close(c, (a @ b).relu() + 1, "the side stream's result", atol=1e-5)
    return f"side stream, wait_stream, events ({ms:.3g} ms), result = the CPU's"


def rng() -> str:
    draws = []
    for _ in range(2):
        torch.manual_seed(7)
        torch.cuda.manual_seed(7)
        draws.append(torch.randn(8, device="cuda").cpu())
    expect(torch.equal(*draws), "seeding twice gave different draws")
    state = torch.cuda.get_rng_state()
    first = torch.randn(8, device="cuda").cpu()
    torch.cuda.set_rng_state(state)
    expect(torch.equal(torch.randn(8, device="cuda").cpu(), first),
           "set_rng_state(get_rng_state()) did not repeat the draws")
    return "seeded draws repeat; get/set_rng_state round trip"


def memory() -> str:
    before = torch.cuda.memory_allocated()
    x = torch.empty(NBYTES // 4, device="cuda")
    grown = torch.cuda.memory_allocated() - before
    current = torch.cuda.memory_stats()["allocated_bytes.all.current"]
    expect(grown >= NBYTES, f"memory_allocated() grew by {grown} B for a {NBYTES} B tensor")
    expect(current == torch.cuda.memory_allocated(), f"memory_stats() says {current} B allocated, "
                                                     f"memory_allocated() {torch.cuda.memory_allocated()} B")
    del x
    shrunk = before + grown - torch.cuda.memory_allocated()
    expect(shrunk >= NBYTES, f"memory_allocated() shrank by {shrunk} B when a {NBYTES} B tensor was freed")
    return f"+{grown} B, -{shrunk} B; memory_stats agrees"


def save_load() -> str:
    state = MLP().state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cuda")
    for key, value in state.items():
        expect(on_device(loaded[key]), f"{key} loaded onto {loaded[key].device}")
        expect(torch.equal(loaded[key].cpu(), value), f"{key} differs after loading")
    x = torch.randn(4, 4, device="cuda")
    buffer = io.BytesIO()
    torch.save(x, buffer)
    buffer.seek(0)
    back = torch.load(buffer)
    expect(on_device(back) and torch.equal(back.cpu(), x.cpu()), f"a device tensor came back as {back.device}")
    return f"a CPU state_dict onto the device ({len(state)} tensors); a device tensor round trip"


def compiled() -> str:
    from diopi import compile_default

    _, eager = models()
    model, (x, y) = copy.deepcopy(eager), batch(0)
    before = compile_default.chosen_backends()
    try:
        out = torch.compile(model)(x.cuda())
        F.cross_entropy(out, y.cuda()).backward()
    finally:
        torch._dynamo.reset()
    ref = eager(x.cuda())
    F.cross_entropy(ref, y.cuda()).backward()
    close(out, ref, "the compiled forward", atol=1e-5, reference="eager's")
    for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
        close(q.grad, p.grad, f"the compiled backward's {name}.grad", atol=1e-5, reference="eager's")
    used = sorted((compile_default.chosen_backends() - before).keys())
    return f"forward and backward = eager (backend {', '.join(used) or 'inductor'})"


def op_tools_run() -> str:
    import op_tools

    folder = tempfile.mkdtemp(prefix="ditorch_probe_")
    try:
        _, model = models()
        x, y = (t.cuda() for t in batch(0))
        with contextlib.redirect_stderr(io.StringIO()):  # the tools' own console lines
            with op_tools.OpAutoCompare(results_dir=folder, report=False) as compare:
                F.cross_entropy(model(x), y).backward()
            with op_tools.OpTimeMeasure(results_dir=folder) as timer:
                F.cross_entropy(model(x), y).backward()
        checked, timed = compare.results, timer.results
        expect(checked, "OpAutoCompare checked no operator")
        failed = sorted({r["name"] for r in compare.failures})
        expect(not failed, f"OpAutoCompare FAIL: {', '.join(failed)}")
        untimed = sorted({r["name"] for r in checked} - {r["name"] for r in timed})
        expect(timed and not untimed, f"OpTimeMeasure timed no {', '.join(untimed) or 'operator'}")
        return f"OpAutoCompare {len(checked)} rows, no FAIL; OpTimeMeasure {len(timed)} rows"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


IDIOMS = (
    Idiom("train step equal to the CPU", train_step),
    Idiom("AMP (autocast + GradScaler)", amp, uses=("is_bf16_supported",)),
    Idiom("pinned DataLoader", pinned_loader),
    Idiom("streams and events", streams_events, uses=("Stream", "current_stream", "stream", "Event", "synchronize")),
    Idiom("RNG reproducibility", rng, uses=("manual_seed", "get_rng_state", "set_rng_state")),
    Idiom("memory statistics", memory, uses=("memory_allocated", "memory_stats")),
    Idiom("save/load with map_location", save_load),
    Idiom("torch.compile", compiled, compiles=True),
    Idiom("op tools", op_tools_run),
)
