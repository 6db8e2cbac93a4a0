"""The code around the arithmetic in CUDA-written programs: default-device contexts, DataParallel, the profiler.

Each case runs ``import torch; import ditorch`` in its own process (the mapping is process-wide) and prints OK.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from vendor_env import clean_env


def check(body: str, **env: str) -> str:
    code = "import os, sys, warnings\nimport torch\nimport ditorch\n" + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", code], env=clean_env(DITORCH_QUIET="1", **env),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_default_device_contexts_are_respected() -> None:
    check("""
        assert ditorch.mocked
        with torch.device("meta"):
            layer = torch.nn.Linear(4, 4)
            assert torch.empty(2).device.type == "meta" and torch.ones(2).is_meta
        assert layer.weight.is_meta and torch.empty(2).device.type == "cpu"
        with torch.device("cuda"):
            assert torch.zeros(2).device == torch.device("dipu", 0) and torch.nn.Linear(2, 2).weight.is_cuda
        torch.set_default_device("cuda")
        assert torch.arange(3).device.type == "dipu" and torch.get_default_device().type == "dipu"
        torch.set_default_device("meta"); assert torch.rand(2).is_meta
        torch.set_default_device(None); assert torch.rand(2).device.type == "cpu"
        print("OK")
    """)


def test_from_pretrained_initialises_buffers_as_without_ditorch(tmp_path) -> None:  # noqa: ANN001
    """transformers builds models under a meta/default-device context and fills non-persistent buffers (rotary
    ``inv_freq``) itself: under the mapping they must hold the same values as without it."""
    check(f"""
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = LlamaForCausalLM(config).eval()
        ids = torch.randint(0, 64, (2, 12))
        with torch.no_grad():
            expected = model(ids).logits
        model.save_pretrained({str(tmp_path)!r})
        for device in ("cpu", "cuda"):
            loaded = LlamaForCausalLM.from_pretrained({str(tmp_path)!r}).to(device).eval()
            rotary = loaded.model.rotary_emb.inv_freq
            assert torch.equal(rotary.cpu(), model.model.rotary_emb.inv_freq), (device, rotary)
            with torch.no_grad():
                got = loaded(ids.to(device)).logits.cpu()
            assert torch.allclose(got, expected, atol=1e-5), (device, (got - expected).abs().max())
        print("OK")
    """, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def test_data_parallel_runs_on_one_device_and_refuses_several_clearly() -> None:
    check("""
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        x = torch.randn(3, 4)
        expected = model(x)
        wrapped = torch.nn.DataParallel(model)
        assert model.weight.device.type == "dipu"
        out = wrapped(x)  # a CPU input is moved, as DataParallel does
        assert out.device.type == "dipu" and torch.allclose(out.cpu(), expected, atol=1e-6)
        out.sum().backward(); assert model.weight.grad is not None
        print("OK")
    """)
    out = check("""
        try:
            torch.nn.DataParallel(torch.nn.Linear(4, 2))
        except RuntimeError as exc:
            assert "DistributedDataParallel" in str(exc) and "2 dipu devices" in str(exc), exc
            print("OK")
    """, DROPLET_DEVICE_COUNT="2")
    assert "OK" in out


def test_profiler_cuda_activity_traces_the_device_without_per_op_warnings() -> None:
    out = check("""
        from torch.profiler import ProfilerActivity, profile
        model = torch.nn.Linear(16, 16).cuda(); x = torch.randn(4, 16, device="cuda")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(3):
                model(x).sum().backward()
        names = {e.name for e in prof.events()}
        assert "aten::linear" in names and "aten::mm" in names, sorted(names)[:20]
        with torch.autograd.profiler.profile(use_device="cuda") as legacy:
            model(x)
        assert "aten::linear" in {e.name for e in legacy.function_events}
        print("OK")
    """)
    assert "Failed to record CUDA event" not in out, out[-2000:]


def test_profiler_drops_cuda_with_one_warning_when_the_vendor_has_no_activity() -> None:
    check("""
        from ditorch import mocking
        from ditorch.mocking import profiler
        from torch.profiler import ProfilerActivity, profile
        profiler.vendor_activity = lambda device_type: None   # a vendor whose profiler cannot trace its device
        mocking.uninstall(); mocking.install(ditorch.adapter)
        x = torch.ones(4, device="cuda")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    x + 1
                with profile(activities=[ProfilerActivity.CUDA]):
                    x + 1
        ours = [str(w.message) for w in caught if "ProfilerActivity.CUDA is dropped" in str(w.message)]
        assert len(ours) == 1 and "dipu" in ours[0], ours
        assert "aten::add" in {e.name for e in prof.events()}
        print("OK")
    """)


def test_factories_asking_for_pinned_memory_and_safetensors_loading_onto_cuda(tmp_path) -> None:  # noqa: ANN001
    """safetensors stages tensors it loads onto "cuda" in pinned host memory (peft loads adapters that way)."""
    check(f"""
        from safetensors.torch import load_file, save_file
        for made in (torch.empty(3, pin_memory=True), torch.zeros(2, 3, device="cpu", pin_memory=True)):
            assert made.is_pinned() and made.device.type == "cpu"
        assert not torch.empty(3).is_pinned()
        weights = {{"w": torch.randn(4, 3), "b": torch.arange(5)}}
        save_file(weights, {str(tmp_path / "w.safetensors")!r})
        loaded = load_file({str(tmp_path / "w.safetensors")!r}, device="cuda")
        assert all(t.device.type == "dipu" and torch.equal(t.cpu(), weights[k]) for k, t in loaded.items())
        print("OK")
    """)


def test_op_tools_call_sites_are_the_users_lines_not_the_mapping(tmp_path) -> None:  # noqa: ANN001
    """Under the mapping, ``.cuda()``, ``.to("cuda")`` and factories go through ditorch's wrappers; the call site
    op_tools reports is still the line of the user's script."""
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""
        import torch
        import ditorch
        from op_tools import OpObserve
        x = torch.ones(3)
        tool = OpObserve()
        tool.start()
        a = x.cuda()  # site-cuda
        b = torch.zeros(3, device="cuda")  # site-zeros
        c = x.to("cuda")  # site-to
        tool.stop()
    """))
    result = subprocess.run([sys.executable, str(script)], env=clean_env(DITORCH_QUIET="1"), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("OpObserve:")]  # OpObserve's console
    assert len(lines) == 3, result.stderr
    for line, mark in zip(lines, ("site-cuda", "site-zeros", "site-to"), strict=True):
        assert f"{script}:" in line and mark in line, line
        assert "ditorch" not in line.split(" at ", 1)[1], line


def test_record_stream_with_cuda_streams() -> None:
    """LMDeploy's engine calls ``out.record_stream(torch.cuda.current_stream())``: torch.cuda.Stream is the device's
    Stream, a torch.Stream, which PyTorch's argument parser accepts."""
    check("""
        x = torch.arange(8.0, device="cuda")
        x.record_stream(torch.cuda.current_stream())
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            assert torch.cuda.current_stream() == s
            y = x * 2
            y.record_stream(torch.cuda.current_stream())
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        torch.cuda.current_stream().wait_stream(s)
        x.record_stream(s)
        done = torch.cuda.Event(); done.record(s); done.synchronize()
        assert torch.equal(x.cpu(), torch.arange(8.0)) and torch.equal(y.cpu(), torch.arange(8.0) * 2)
        try:
            x.record_stream(0)
        except TypeError as e:
            assert "torch.Stream" in str(e), e
        else:
            raise AssertionError("record_stream(0) did not raise")
        print("OK")
    """)
