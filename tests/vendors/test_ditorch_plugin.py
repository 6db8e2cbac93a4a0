"""ditorch on a real C++ PrivateUse1 plugin nobody here wrote (torch_openreg), with no adapter for it.

The plugin loads itself on ``import torch`` (PyTorch's backend autoload) and takes PrivateUse1 as ``openreg``. Every
check runs in a fresh interpreter (``import ditorch`` changes torch process-wide) and compares with the CPU. Where
openreg itself lacks something (no memory statistics, no get_device_properties; its README lists them), the test
asserts the clear refusal, not the feature.
"""

from __future__ import annotations

import json
import math
import re
import socket
import textwrap
from pathlib import Path

import pytest
from plugin_run import SCRIPTS, clean_env, ditorch, python, run_code

from cuda_surface_check import surface_report  # tests/cuda_surface_check.py

DEVICE, PLUGIN = "openreg", "torch_openreg"
TRAIN = SCRIPTS / "train_cuda.py"
HOW = "generic: PrivateUse1 backend 'openreg' of torch_openreg, loaded by PyTorch's backend autoload " \
      "(torch.backends entry point 'torch_openreg')"
COMPILE_LINE = "torch.compile: inductor has no code generator for openreg; graphs on openreg are compiled with " \
               "'aot_eager'"


# -- detection ---------------------------------------------------------------------------------------------------

def test_found_without_an_adapter_and_used_not_the_cpu():
    found = run_code("""
a = ditorch.adapter
print(json.dumps({"name": a.name, "framework": a.framework, "device_type": a.device_type, "how": a.describe(),
                  "generic": a.is_generic, "dist": a.dist_backend, "status": ditorch.detection.status,
                  "failures": ditorch.failures, "mocked": ditorch.mocked, "x": str(torch.ones(1).cuda().device)}))
""")
    assert (found["name"], found["framework"], found["device_type"], found["generic"]) == (DEVICE, PLUGIN, DEVICE, True)
    assert found["how"] == HOW and found["failures"] == [] and found["mocked"] and found["x"] == "openreg:0"
    assert found["dist"] == "gloo"  # openreg registers no collective backend: CPU copies through gloo
    assert found["status"]["dipu"].startswith("not tried: PrivateUse1 is held by torch_openreg (device 'openreg'")
    assert found["status"][DEVICE] == "active"


def test_ditorch_info_names_the_plugin_and_how_it_was_found():
    proc = ditorch("info", DITORCH_QUIET="1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == f"framework: torch_openreg 0.0.1 ({HOW})"
    assert "  openreg:0-1  openreg" in lines and "mocking: on (cuda -> openreg, nccl -> gloo)" in lines


def test_torch_dipu_refuses_in_one_line_naming_the_plugin():
    proc = python("-c", "import torch_dipu")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "ImportError: torch_dipu cannot register the 'dipu' device: PrivateUse1 is already held by torch_openreg "
        "(device 'openreg', loaded on import torch by PyTorch's backend autoload, entry point 'torch_openreg' in "
        "torch.backends; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off); one process holds one PrivateUse1 backend")


def test_asking_for_another_vendor_is_one_line_exit_2():
    proc = ditorch("info", DITORCH_VENDOR="dipu")
    assert proc.returncode == 2 and proc.stderr.startswith(
        "ditorch info: error: DITORCH_VENDOR=dipu: torch_dipu cannot load: PrivateUse1 is held by torch_openreg")
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
    assert ditorch("info", DITORCH_VENDOR="openreg", DITORCH_QUIET="1").returncode == 0


def test_an_explicit_adapter_wins_over_the_generic_one(tmp_path: Path):
    """The ten-line adapter of docs/ditorch.md, published as an entry point: used instead of the generic one."""
    (tmp_path / "openreg_ditorch_adapter.py").write_text(textwrap.dedent("""
        from ditorch.adapters import Adapter

        def adapter():
            return Adapter(name="openreg", framework="torch_openreg", device_type="openreg", dist_backend="gloo",
                           priority=5)
    """))
    info = tmp_path / "openreg_ditorch_adapter-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: openreg-ditorch-adapter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ditorch.adapters]\nopenreg = openreg_ditorch_adapter:adapter\n")
    found = run_code("print(json.dumps([ditorch.adapter.describe(), ditorch.adapter.is_generic, "
                     "ditorch.adapter.priority, torch.cuda.device_count()]))", PYTHONPATH=str(tmp_path))
    assert found == ["adapter openreg", False, 5, 2]


# -- the CUDA surface --------------------------------------------------------------------------------------------

def test_every_cuda_name_is_mapped_or_refuses_clearly():
    report = surface_report(clean_env(DITORCH_QUIET="1"))
    assert report["problems"] == []
    kinds = report["kinds"]
    for name in ("synchronize", "Stream", "Event", "current_stream", "get_device_name", "is_bf16_supported",
                 "memory_allocated", "seed"):
        assert kinds[f"torch.cuda.{name}"] == "generic", name
    for name in ("device_count", "set_device", "manual_seed", "get_rng_state"):
        assert kinds[f"torch.cuda.{name}"] == "vendor", name
    assert kinds["torch.cuda.get_device_properties"] == "derived"
    # refused by the plugin at call time, each naming itself and openreg: its allocator keeps no statistics
    assert {"torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated", "torch.cuda.memory_stats",
            "torch.cuda.mem_get_info", "torch.cuda.memory_summary"} <= set(report["refused"])


def test_device_queries_are_derived():
    found = run_code("""
from ditorch.mocking.cuda_surface import NotSupportedOnDevice
p = torch.cuda.get_device_properties(1)
try:
    p.total_memory
    memory = "answered"
except NotSupportedOnDevice as exc:
    memory = str(exc)
with torch.cuda.device(1):
    inside = [torch.cuda.current_device(), str(torch.empty(1, device="cuda").device)]
print(json.dumps({"name": p.name, "capability": list(torch.cuda.get_device_capability()), "props": [p.major, p.minor],
                  "device_name": torch.cuda.get_device_name(1), "bf16": torch.cuda.is_bf16_supported(),
                  "count": torch.cuda.device_count(), "inside": inside, "after": torch.cuda.current_device(),
                  "memory": memory, "repr": repr(p)}))
""")
    assert (found["name"], found["device_name"], found["count"]) == ("openreg", "openreg", 2)
    assert found["capability"] == found["props"] == [8, 0] and found["bf16"] is True  # autocast accepts bf16
    assert found["inside"] == [1, "openreg:1"] and found["after"] == 0
    assert found["memory"].startswith("torch.cuda.get_device_properties(1).total_memory is not known on openreg")
    assert "total_memory" not in found["repr"]


def test_memory_statistics_are_real_or_refuse():
    found = run_code("""
from ditorch.mocking.cuda_surface import NotSupportedOnDevice
x = torch.ones(1 << 20, device="cuda")
out = {}
for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "memory_stats", "memory_summary",
             "mem_get_info", "reset_peak_memory_stats"):
    try:
        out[name] = repr(getattr(torch.cuda, name)())
    except NotSupportedOnDevice as exc:
        out[name] = "refused: " + str(exc)
torch.cuda.empty_cache()  # an instruction, not a statistic: nothing cached, nothing to release
print(json.dumps(out))
""")
    for name, text in found.items():
        assert text.startswith("refused: torch.cuda."), (name, text)  # never 0 bytes beside a live 4 MiB tensor
        assert "is not supported on openreg" in text and "is not a DeviceAllocator" in text, text


def test_streams_events_and_synchronize_through_the_generic_apis():
    found = run_code("""
x = torch.randn(256, 256, device="cuda")
side = torch.cuda.Stream()
if side == torch.cuda.current_stream():  # openreg hands out pool streams in turn, the current one first
    side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
with torch.cuda.stream(side):
    inside = torch.cuda.current_stream() == side
    start.record()
    y = (x @ x).relu()
    end.record()
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
torch.cuda.synchronize(1)  # another device: the current device stays
print(json.dumps({
    "equal": torch.equal(y.cpu(), (x.cpu() @ x.cpu()).relu()), "inside": inside,
    "after": torch.cuda.current_stream() == side, "current_device": torch.cuda.current_device(),
    "elapsed": start.elapsed_time(end), "done": end.query(), "isinstance": [isinstance(side, torch.cuda.Stream),
    isinstance(start, torch.cuda.Event), isinstance(torch.cuda.current_stream(), torch.cuda.Stream)],
    "device": str(side.device)}))
""")
    assert found["equal"] and found["inside"] and not found["after"] and found["current_device"] == 0
    assert found["elapsed"] > 0 and found["done"] and found["isinstance"] == [True, True, True]
    assert found["device"] == "openreg:0"


def test_seeding_the_device_makes_its_draws_reproducible():
    """openreg's random kernels draw from the CPU's generator, not from its own: torch.cuda's seeding and RNG state
    follow the generator the kernels use, so CUDA code that seeds the device gets repeatable draws."""
    found = run_code("""
torch.cuda.manual_seed(7)
a = torch.randn(5, device="cuda").cpu()
torch.cuda.manual_seed(7)
b = torch.randn(5, device="cuda").cpu()
state = torch.cuda.get_rng_state()
c = torch.rand(5, device="cuda").cpu()
torch.cuda.set_rng_state(state)
d = torch.rand(5, device="cuda").cpu()
torch.cuda.manual_seed_all(8)
e = torch.randn(5, device="cuda:1").cpu()
torch.cuda.set_rng_state_all(torch.cuda.get_rng_state_all())
print(json.dumps({"seed": torch.equal(a, b), "state": torch.equal(c, d), "other_seed": not torch.equal(a, e),
                  "initial_seed": torch.cuda.initial_seed()}))
""")
    assert found == {"seed": True, "state": True, "other_seed": True, "initial_seed": 8}


# -- training --------------------------------------------------------------------------------------------------

def _train(tmp_path: Path, name: str, amp: str, on_device: bool, launcher: str = "ditorch run") -> dict:
    out = tmp_path / f"{name}.json"
    if not on_device:
        proc = python(str(TRAIN), str(out), "--amp", amp)  # no ditorch: no GPU, so the CPU
    elif launcher == "ditorch run":
        proc = ditorch("run", "--", str(TRAIN), str(out), "--amp", amp)
    else:
        proc = python("-c", f"import torch, ditorch, runpy, sys; sys.argv = [{str(TRAIN)!r}, {str(out)!r}, "
                            f"'--amp', {amp!r}]; runpy.run_path({str(TRAIN)!r}, run_name='__main__')")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def _flat(params: dict) -> list[float]:
    return [v for name in sorted(params) for v in params[name]]


@pytest.mark.parametrize("launcher", ["ditorch run", "import ditorch"])
def test_cuda_written_training_equals_the_cpu_in_float32(tmp_path: Path, launcher: str):
    cpu = _train(tmp_path, "cpu", "fp32", on_device=False)
    dev = _train(tmp_path, "dev", "fp32", on_device=True, launcher=launcher)
    assert (cpu["device"], dev["device"]) == ("cpu", "openreg:0")
    assert dev["tied"] is True and cpu["tied"] is True  # model.cuda() kept the tied embedding/output weight shared
    assert dev["elapsed_ms"] > 0  # torch.cuda.Event timing around the loop
    assert len(dev["losses"]) == len(cpu["losses"]) == 12
    for a, b in zip(_flat(cpu["params"]), _flat(dev["params"]), strict=True):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (a, b)
    for a, b in zip(cpu["losses"], dev["losses"], strict=True):
        assert math.isclose(a, b, rel_tol=1e-5), (a, b)


def test_bf16_autocast_training_is_within_the_noise_floor(tmp_path: Path):
    """The device's bf16 run is as close to the CPU's float32 run as the CPU's own bf16 run is (2x, + 1e-4)."""
    reference = _train(tmp_path, "cpu32", "fp32", on_device=False)
    cpu16 = _train(tmp_path, "cpu16", "bf16", on_device=False)
    dev16 = _train(tmp_path, "dev16", "bf16", on_device=True)
    assert dev16["logits_dtype"] == cpu16["logits_dtype"] == "torch.bfloat16"

    def loss_gap(run: dict) -> float:
        return max(abs(a - b) for a, b in zip(reference["losses"], run["losses"], strict=True))

    def param_gap(run: dict) -> float:
        return math.dist(_flat(reference["params"]), _flat(run["params"]))

    assert loss_gap(dev16) <= 2 * loss_gap(cpu16) + 1e-4, (loss_gap(dev16), loss_gap(cpu16))
    assert param_gap(dev16) <= 2 * param_gap(cpu16) + 1e-4, (param_gap(dev16), param_gap(cpu16))


def test_fp16_autocast_with_a_grad_scaler_and_tied_weights_stay_one_object():
    found = run_code("""
import torch.nn as nn, torch.nn.functional as F
emb = nn.Embedding(16, 8)
head = nn.Linear(8, 16, bias=False)
head.weight = emb.weight
model = nn.ModuleDict({"emb": emb, "head": head})
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # made before the move, as many scripts do
model.cuda()
scaler = torch.amp.GradScaler("cuda")
tokens = torch.randint(0, 16, (4, 6), device="cuda")
before = model["emb"].weight.detach().cpu().clone()
with torch.autocast("cuda", dtype=torch.float16):
    logits = model["head"](model["emb"](tokens))
    loss = F.cross_entropy(logits.float().reshape(-1, 16), tokens.reshape(-1))
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
print(json.dumps({"tied": model["head"].weight is model["emb"].weight, "dtype": str(logits.dtype),
                  "moved": str(model["emb"].weight.device), "updated": not torch.equal(before,
                  model["emb"].weight.detach().cpu()), "scale": scaler.get_scale()}))
""")
    assert found == {"tied": True, "dtype": "torch.float16", "moved": "openreg:0", "updated": True, "scale": 65536.0}


def test_data_parallel_over_one_device_and_a_clear_refusal_over_two():
    found = run_code("""
m = torch.nn.Linear(4, 2).cuda()
one = torch.nn.DataParallel(m, device_ids=[0])(torch.ones(3, 4))
try:
    torch.nn.DataParallel(m)
    two = "accepted"
except RuntimeError as exc:
    two = str(exc)
print(json.dumps({"one": str(one.device), "two": two}))
""")
    assert found["one"] == "openreg:0"
    assert found["two"].startswith("nn.DataParallel over 2 openreg devices is not supported on openreg")


def test_nccl_all_reduce_runs_on_gloo_with_two_processes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(__file__).resolve().parents[1] / "ditorch" / "cuda_scripts" / "allreduce_nccl.py"
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-m", "ditorch", "run", "--", str(script), str(rank), "2", str(port)],
                              env=clean_env(DITORCH_QUIET="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for rank in range(2)]
    try:
        outputs = [proc.communicate(timeout=180) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, (proc, (out, err)) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, out + err
        assert f"rank {rank} all_reduce: [3.0, 30.0]" in out and f"rank {rank} backend: gloo" in out
        assert re.search(rf"rank {rank} device: openreg:{rank}", out), out


# -- torch.compile --------------------------------------------------------------------------------------------

def test_torch_compile_falls_back_to_aot_eager_with_one_line():
    proc = python("-c", textwrap.dedent("""
        import json, torch, ditorch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2)).cuda()
        x = torch.randn(4, 8, device="cuda")
        compiled = torch.compile(model)
        out = compiled(x)
        out.sum().backward()
        grads = [p.grad.cpu().clone() for p in model.parameters()]
        model.zero_grad()
        eager = model(x)
        eager.sum().backward()
        same = all(torch.allclose(g, p.grad.cpu(), rtol=1e-5, atol=1e-6) for g, p in zip(grads, model.parameters()))
        compiled(torch.randn(4, 8, device="cuda"))  # a second call: no second line
        print(json.dumps({"close": torch.allclose(out.cpu(), eager.cpu(), rtol=1e-5, atol=1e-6), "grads": same,
                          "device": str(out.device)}))
    """), DITORCH_QUIET="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"close": True, "grads": True, "device": "openreg:0"}
    assert [line for line in proc.stderr.splitlines() if "torch.compile" in line] == [COMPILE_LINE]


# -- module dumps across runs -------------------------------------------------------------------------------------

def test_dump_modules_and_compare_runs_find_no_divergence_then_the_wrong_module(tmp_path: Path):
    def dump(name: str, *script: str, **env: str) -> Path:
        out = tmp_path / name
        proc = ditorch("dump-modules", "--out", str(out), "--steps", "1-2", "--stop-after", "2", "--", *script,
                       str(tmp_path / f"{name}.json"), DITORCH_QUIET="1", **env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return out

    reference = dump("cpu", str(TRAIN), DITORCH_VENDOR="cpu")
    device = dump("device", str(TRAIN))
    same = ditorch("compare-runs", str(reference), str(device))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no divergence" in same.stdout
    wrong = dump("wrong", str(SCRIPTS / "with_wrong_gelu.py"), str(TRAIN))
    parted = ditorch("compare-runs", "--json", str(tmp_path / "cmp.json"), str(reference), str(wrong))
    assert parted.returncode == 1, parted.stdout + parted.stderr
    first = json.loads((tmp_path / "cmp.json").read_text())["first_divergence"]["forward"]
    assert (first["step"], first["module"]) == (1, "mlp.1")  # the GELU, first in forward order
