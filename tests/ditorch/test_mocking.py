"""ditorch.mocking: CUDA-written code runs on dipu. Each scenario runs in its own Python process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import io, os, sys, warnings
import torch, torch_dipu
from ditorch.adapters.base import Adapter
from ditorch import mocking
mocking.install(Adapter("dipu", "torch_dipu", "dipu", "gloo"))
"""


def run(body: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "DITORCH_QUIET": "1", "DITORCH_DISABLE_MOCK": "1", **env}
    for name in ("DITORCH_DTYPE_CAST", "DITORCH_SHOW_DEVICE_AS_CUDA", "DROPLET_UNSUPPORTED_DTYPES"):
        if name not in env:
            full_env.pop(name, None)
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code, *args], env=full_env, capture_output=True, text=True,
                          timeout=300)


def check(body: str, **env: str) -> str:
    result = run(body, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_torch_cuda_api_maps_to_device_module() -> None:
    check("""
        assert torch.cuda.is_available() and torch.cuda.device_count() == torch.dipu.device_count()
        assert torch.cuda.get_device_name(0) == torch.dipu.get_device_name(0)
        total = torch.dipu.get_device_properties(0).total_memory
        assert torch.cuda.get_device_properties("cuda:0").total_memory == total
        assert torch.cuda.is_bf16_supported() == torch.dipu.is_bf16_supported()
        torch.cuda.set_device("cuda:1"); assert torch.cuda.current_device() == 1 == torch.dipu.current_device()
        with torch.cuda.device(torch.device("cuda", 0)):
            assert torch.cuda.current_device() == 0
        assert torch.cuda.current_device() == 1
        assert torch.randn(1).cuda().device == torch.device("dipu", 1)
        torch.cuda.set_device(0)
        torch.cuda.synchronize(); torch.cuda.synchronize(torch.device("cuda:0"))
        assert torch.cuda.Stream is torch.dipu.Stream and torch.cuda.Event is torch.dipu.Event
        with torch.cuda.stream(torch.cuda.Stream()):
            assert isinstance(torch.cuda.current_stream(), torch.dipu.Stream)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); torch.randn(64, 64, device="cuda").matmul(torch.randn(64, 64, device="cuda")); end.record()
        end.synchronize(); assert start.elapsed_time(end) > 0
        torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
        x = torch.empty(1024, device="cuda")
        assert torch.cuda.memory_allocated() - base == 4096 == torch.cuda.memory_allocated("cuda:0") - base
        assert torch.cuda.max_memory_allocated() >= base + 4096
        free, total = torch.cuda.mem_get_info(); assert total == torch.dipu.mem_get_info()[1] and free < total
        del x; torch.cuda.empty_cache(); assert torch.cuda.memory_allocated() == base
        torch.cuda.manual_seed(7); a = torch.randn(4, device="cuda")
        torch.cuda.manual_seed_all(7); b = torch.randn(4, device="cuda"); assert torch.equal(a, b)
        state = torch.cuda.get_rng_state(); c = torch.randn(4, device="cuda")
        torch.cuda.set_rng_state(state); assert torch.equal(c, torch.randn(4, device="cuda"))
        g = torch.Generator(device="cuda"); g.manual_seed(3); d = torch.randn(3, device="cuda", generator=g)
        g.manual_seed(3); assert isinstance(g, torch.Generator)
        assert isinstance(torch.default_generator, torch.Generator)  # torch's own generators too
        assert torch.equal(d, torch.randn(3, device="cuda", generator=g))
        mocking.install(Adapter("dipu", "torch_dipu", "dipu", "gloo"))  # idempotent
        mocking.uninstall()
        assert not torch.cuda.is_available() and torch.Generator is torch_dipu.generators.Generator
        assert "to" not in vars(torch.Tensor) and "is_cuda" not in vars(torch.Tensor)
        print("OK")
    """, DROPLET_DEVICE_COUNT="2")


def test_device_strings_everywhere() -> None:
    check("""
        dipu0 = torch.device("dipu", 0)
        made = [torch.empty(2, device="cuda"), torch.zeros(2, device="cuda:0"),
                torch.ones(2, device=torch.device("cuda")), torch.full((2,), 3.0, device="cuda"),
                torch.rand(2, device="cuda"), torch.randint(5, (2,), device="cuda"),
                torch.arange(3, device="cuda"), torch.tensor([1.0, 2.0], device="cuda"), torch.eye(2, device="cuda"),
                torch.linspace(0, 1, 3, device="cuda"), torch.zeros_like(torch.ones(2), device="cuda"),
                torch.ones(2).new_zeros(3, device="cuda"), torch.ones(2).to("cuda"), torch.ones(2).to("cuda:1"),
                torch.ones(2).to(device="cuda", dtype=torch.float16), torch.ones(2).cuda(), torch.ones(2).cuda(1)]
        assert [str(t.device) for t in made] == ["dipu:0"] * 13 + ["dipu:1", "dipu:0", "dipu:0", "dipu:1"], made
        assert made[14].dtype == torch.float16 and torch.equal(made[7].cpu(), torch.tensor([1.0, 2.0]))
        assert all(t.is_cuda for t in made) and not torch.ones(1).is_cuda
        model = torch.nn.Linear(3, 2).cuda()
        assert model.weight.device == dipu0 and model.weight.is_cuda
        model2 = torch.nn.Linear(3, 2).to("cuda:1"); assert model2.bias.device == torch.device("dipu", 1)
        buffer = io.BytesIO(); torch.save(model.state_dict(), buffer)
        for location in ("cuda", torch.device("cuda:0"), {"dipu:0": "cuda:0"}, None):
            buffer.seek(0)
            loaded = torch.load(buffer, map_location=location)
            assert loaded["weight"].device == dipu0 and torch.equal(loaded["weight"].cpu(), model.weight.cpu())
        assert torch.ones(2).device.type == "cpu"  # no DITORCH_SHOW_DEVICE_AS_CUDA: the true device
        print("OK")
    """, DROPLET_DEVICE_COUNT="2")


def test_amp_autocast_and_grad_scaler_training_loop() -> None:
    check("""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler("cuda")
        assert scaler._device == "dipu" and torch.cuda.amp.GradScaler()._device == "dipu"
        x, y = torch.randn(32, 8).cuda(), torch.randn(32, 1).cuda()
        losses = []
        for _ in range(20):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(x)
                assert out.dtype == torch.bfloat16 and torch.is_autocast_enabled("cuda")
                loss = torch.nn.functional.mse_loss(out.float(), y)
            scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
            torch.cuda.synchronize(); losses.append(loss.item())
        assert losses[-1] < losses[0], losses
        assert scaler.get_scale() == 65536.0  # no overflow: the scale grows only after 2000 steps
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            assert model(x).dtype == torch.bfloat16
        assert model(x).dtype == torch.float32
        print("OK")
    """)


def test_dtype_policy_default_keeps_the_error() -> None:
    out = check("""
        try:
            torch.zeros(2, dtype=torch.float64, device="cuda")
        except torch_dipu.UnsupportedDtypeError as exc:
            assert "float64" in str(exc)
        else:
            raise AssertionError("float64 was accepted")
        try:
            torch.ones(2, dtype=torch.float64).cuda()
        except torch_dipu.UnsupportedDtypeError:
            pass
        else:
            raise AssertionError("float64 .cuda() was accepted")
        assert torch.ones(2, device="cuda").dtype == torch.float32
        print("OK")
    """, DROPLET_UNSUPPORTED_DTYPES="float64")
    assert "DITORCH_DTYPE_CAST" not in out


@pytest.mark.parametrize("value", ["1", "float64:float32,complex128:complex64"])
def test_dtype_policy_cast_warns_once_per_call_site(value: str) -> None:
    check("""
        import numpy as np
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                a = torch.zeros(2, dtype=torch.float64, device="cuda")  # site 1
            b = torch.arange(3, dtype=torch.float64).cuda()  # site 2
            c = torch.ones(2, dtype=torch.complex128).to("cuda")  # site 3
            d = torch.nn.Linear(2, 2).double().cuda()  # site 4 (inside Module._apply: reported here)
            e = torch.tensor(np.ones(2), device="cuda")  # site 5
            f = torch.ones(2, device="cuda").double()  # site 6
            g = torch.ones(2, dtype=torch.float64, device="cuda").to(torch.float16)  # site 7 (supported target)
        assert a.dtype == b.dtype == d.weight.dtype == e.dtype == f.dtype == torch.float32, (a, b, d.weight, e, f)
        assert c.dtype == torch.complex64 and g.dtype == torch.float16 and a.device.type == "dipu"
        assert torch.equal(b.cpu(), torch.arange(3.0))
        ours = [w for w in caught if "DITORCH_DTYPE_CAST" in str(w.message)]
        lines = sorted({w.lineno for w in ours})
        assert len(ours) == len(lines) == 7, [(w.filename, w.lineno, str(w.message)) for w in ours]
        assert all(w.filename == "<string>" for w in ours), [w.filename for w in ours]
        assert torch.ones(2, dtype=torch.float64).dtype == torch.float64  # CPU tensors are left alone
        print("OK")
    """, DROPLET_UNSUPPORTED_DTYPES="float64,complex128", DITORCH_DTYPE_CAST=value)


def test_dtype_policy_cast_does_nothing_when_supported() -> None:
    check("""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = torch.zeros(2, dtype=torch.float64, device="cuda")
        assert a.dtype == torch.float64 and not [w for w in caught if "DITORCH" in str(w.message)]
        print("OK")
    """, DITORCH_DTYPE_CAST="1")


def test_show_device_as_cuda() -> None:
    check("""
        x = torch.randn(3, device="cuda")
        assert x.device.type == "cuda" and x.device == torch.device("cuda", 0) and x.is_cuda
        y = torch.zeros(3, device=x.device)  # code that reuses the shown device still lands on dipu
        assert torch._C.TensorBase.device.__get__(y).type == "dipu"
        assert torch.equal((x + y).cpu(), x.cpu()) and torch.ones(1).device.type == "cpu"
        model = torch.nn.Linear(3, 3).cuda(); assert next(model.parameters()).device.type == "cuda"
        assert "dipu" in repr(x)  # PyTorch's own code sees the true device
        print("OK")
    """, DITORCH_SHOW_DEVICE_AS_CUDA="1")
    check("""
        assert torch.randn(3, device="cuda").device.type == "dipu"
        print("OK")
    """)


DIST = """
import torch.distributed as dist
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
assert dist.get_backend() == "gloo"
t = torch.full((3,), float(rank + 1), device="cuda")
dist.all_reduce(t)
assert t.device.type == "dipu" and t.tolist() == [3.0, 3.0, 3.0], t
work = dist.all_reduce(t, async_op=True); work.wait()
assert t.tolist() == [6.0, 6.0, 6.0], t
outs = [torch.empty(2, device="cuda") for _ in range(2)]
dist.all_gather(outs, torch.full((2,), float(rank), device="cuda"))
assert [o.tolist() for o in outs] == [[0.0, 0.0], [1.0, 1.0]]
b = torch.full((2,), float(rank), device="cuda"); dist.broadcast(b, src=1); assert b.tolist() == [1.0, 1.0]
group = dist.new_group([0, 1], backend="nccl")
c = torch.ones(1, device="cuda"); dist.all_reduce(c, group=group); assert c.tolist() == [2.0]
dist.barrier()
dist.destroy_process_group()
print("OK", rank)
"""


def test_two_process_nccl_all_reduce() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "DITORCH_QUIET": "1", "DITORCH_DISABLE_MOCK": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", PRELUDE + DIST, str(rank), port], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for rank, (p, (out, err)) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0 and f"OK {rank}" in out, out + err


def test_distributed_backend_names() -> None:
    from ditorch.mocking.distributed import translate_backend

    assert translate_backend("nccl", "hccl", "npu") == "hccl"
    assert translate_backend("cuda:nccl,cpu:gloo", "hccl", "npu") == "npu:hccl,cpu:gloo"
    assert translate_backend("cuda:nccl,cpu:gloo", "gloo", "dipu") == "gloo"
    assert translate_backend("gloo", "hccl", "npu") == "gloo"
    assert translate_backend(None, "hccl", "npu") is None


def test_dtype_cast_switch_parsing() -> None:
    import torch

    from ditorch.mocking.switches import DEFAULT_CASTS, parse_dtype_cast

    assert parse_dtype_cast(None) is None and parse_dtype_cast("0") is None and parse_dtype_cast("") is None
    assert parse_dtype_cast("1") == DEFAULT_CASTS == parse_dtype_cast(True)
    assert parse_dtype_cast(" float64 : bfloat16 ") == {torch.float64: torch.bfloat16}
    with pytest.raises(ValueError, match="DITORCH_DTYPE_CAST"):
        parse_dtype_cast("float64")
    with pytest.raises(ValueError, match="not a torch dtype"):
        parse_dtype_cast("float64:nonsense")


def test_custom_fwd_and_autocast_queries_accept_cuda() -> None:
    check("""
        class Double(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @torch.amp.custom_bwd(device_type="cuda")
            def backward(ctx, grad):
                return grad * 2

        x = torch.ones(2, device="cuda", requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled() and torch.is_autocast_enabled("cuda")
            assert torch.get_autocast_dtype("cuda") == torch.bfloat16
            y = Double.apply(x.bfloat16())
        assert y.dtype == torch.float32 and y.device.type == "dipu"  # cast_inputs ran on the device
        y.sum().backward()
        assert x.grad.cpu().tolist() == [2.0, 2.0]
        print("OK")
    """)
