"""Streams, events, synchronize, per-device RNG and autocast on dipu."""

from __future__ import annotations

import copy

import pytest
import torch


def test_streams_and_synchronize():
    default = torch.dipu.current_stream()
    assert default == torch.dipu.default_stream()
    s = torch.dipu.Stream()
    assert s.device == torch.device("dipu", 0)
    with torch.dipu.stream(s):
        assert torch.dipu.current_stream() == s
        y = torch.ones(3, device="dipu") * 2
    assert torch.dipu.current_stream() == default
    torch.dipu.synchronize()
    s.synchronize()
    assert s.query()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_record_stream_takes_dipu_streams_and_leaves_the_values():
    """``Tensor.record_stream`` accepts only a ``torch.Stream``: torch.dipu.Stream is one."""
    s = torch.dipu.Stream()
    assert isinstance(s, torch.Stream)
    x = torch.arange(6.0).to("dipu")
    for stream in (s, torch.dipu.current_stream(), torch.dipu.default_stream()):
        x.record_stream(stream)
    with torch.dipu.stream(s):
        y = x * 2
        y.record_stream(torch.dipu.current_stream())
    assert torch.equal(x.cpu(), torch.arange(6.0)) and torch.equal(y.cpu(), torch.arange(6.0) * 2)


@pytest.mark.parametrize("bad", [3, None, "dipu:0"])
def test_record_stream_refuses_what_is_not_a_stream(bad):
    with pytest.raises(TypeError, match=r"record_stream\(\): argument 'stream' must be a torch.Stream"):
        torch.ones(2).to("dipu").record_stream(bad)


def test_record_stream_refuses_another_devices_stream():
    with pytest.raises(RuntimeError, match="not a stream of the dipu device"):
        torch.ones(2).to("dipu").record_stream(torch.Stream(device="cpu"))


def test_streams_are_distinct_and_context_managers():
    a, b = torch.dipu.Stream(), torch.dipu.Stream(device="dipu:0", priority=-1)
    assert a == a and a != b and len({a, b, a}) == 2 and a != "stream"
    assert (a.device_index, b.priority, a.priority) == (0, -1, 0) and a.stream_id != b.stream_id
    assert torch.dipu.Stream(stream_id=a.stream_id, device_index=0, device_type=a.device_type) == a
    default = torch.dipu.current_stream()
    with a:
        assert torch.dipu.current_stream() is a
        with b:
            assert torch.dipu.current_stream() is b
        assert torch.dipu.current_stream() is a
    assert torch.dipu.current_stream() is default


def test_event_timing_requires_record():
    e1, e2 = torch.dipu.Event(enable_timing=True), torch.dipu.Event(enable_timing=True)
    with pytest.raises(RuntimeError):
        e1.elapsed_time(e2)
    e1.record()
    e2.record()
    assert 0 <= e1.elapsed_time(e2) < 1000


def test_dipu_manual_seed():
    torch.dipu.manual_seed(7)
    a = torch.rand(5, device="dipu").cpu()
    torch.dipu.manual_seed(7)
    b = torch.rand(5, device="dipu").cpu()
    torch.dipu.manual_seed(8)
    c = torch.rand(5, device="dipu").cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    state = torch.dipu.get_rng_state()
    d = torch.randn(4, device="dipu").cpu()
    torch.dipu.set_rng_state(state)
    assert torch.equal(torch.randn(4, device="dipu").cpu(), d)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_matches_cpu(dtype):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    model_d = copy.deepcopy(model).dipu()
    x = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=dtype):
        want = model(x)
    with torch.autocast("dipu", dtype=dtype):
        got = model_d(x.dipu())
        summed = got + got
        fp32 = torch.exp(got)
    assert got.dtype == dtype == want.dtype
    assert summed.dtype == dtype and fp32.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), want)
    got.float().sum().backward()
    assert model_d.weight.grad.dtype == torch.float32
    assert model_d(x.dipu()).dtype == torch.float32  # outside autocast


def test_random_kernels_draw_from_their_own_devices_generator(four_dipu_devices):
    x0, x1 = torch.ones(1000, device="dipu:0"), torch.ones(1000, device="dipu:1")
    torch.dipu.set_device(0)
    torch.dipu.manual_seed(5)
    expected = torch.nn.functional.dropout(x0, 0.5).cpu()
    torch.dipu.manual_seed(5)
    torch.nn.functional.dropout(x1, 0.5)  # must not advance dipu:0's generator
    host_state = torch.get_rng_state()
    assert torch.equal(torch.nn.functional.dropout(x0, 0.5).cpu(), expected)
    assert torch.equal(torch.get_rng_state(), host_state)  # the host's stream is untouched
