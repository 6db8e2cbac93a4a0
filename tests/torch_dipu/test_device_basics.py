"""The dipu device behaves like a CUDA device for everyday tensor code."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from torch_dipu.tensor import DipuTensor


def test_factories_match_cpu():
    cases = [
        (torch.zeros, ((2, 3),), {}),
        (torch.ones, ((4,),), {"dtype": torch.int64}),
        (torch.full, ((2, 2), 3.5), {}),
        (torch.arange, (5,), {}),
        (torch.arange, (1.0, 2.0, 0.25), {}),
        (torch.eye, (3,), {}),
        (torch.eye, (2, 4), {"dtype": torch.int32}),
        (torch.linspace, (0.0, 1.0, 5), {}),
    ]
    for fn, args, kwargs in cases:
        got = fn(*args, device="dipu", **kwargs)
        want = fn(*args, **kwargs)
        assert got.device == torch.device("dipu", 0), fn
        assert got.is_dipu and type(got) is DipuTensor
        assert got.dtype == want.dtype and got.shape == want.shape, (fn, args)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_empty_and_randn_shapes(four_dipu_devices):
    e = torch.empty(3, 4, device="dipu", dtype=torch.float16)
    assert e.shape == (3, 4) and e.dtype == torch.float16 and e.device.type == "dipu"
    r = torch.randn(1000, device="dipu")
    assert r.shape == (1000,) and abs(r.mean().item()) < 0.2 and 0.8 < r.std().item() < 1.2
    assert torch.empty(2, device="dipu:1").device == torch.device("dipu", 1)


def test_tensor_to_cpu_item():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="dipu")
    assert x.device == torch.device("dipu:0")
    assert torch.equal(x.cpu(), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert x.sum().item() == 10.0
    assert x.to("cpu").device.type == "cpu"
    y = torch.tensor([1, 2]).to("dipu")
    assert y.device.type == "dipu" and y.dtype == torch.int64
    assert y.to(torch.float32).dtype == torch.float32
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert f"{x.sum():.1f}" == "10.0"


def test_repr_like_cuda():
    x = torch.tensor([1.0, 2.0], device="dipu")
    assert repr(x) == "tensor([1., 2.], device='dipu:0')"
    assert str(torch.tensor([[1, 2], [3, 4]], device="dipu")) == "tensor([[1, 2],\n        [3, 4]], device='dipu:0')"
    assert "requires_grad=True" in repr(torch.ones(1, device="dipu", requires_grad=True))


@pytest.mark.parametrize(
    "make_view",
    [
        lambda b: b[1:, ::2],
        lambda b: b.t(),
        lambda b: b.view(12),
        lambda b: b[:, :1].expand(3, 5),
        lambda b: b.select(0, 2),
        lambda b: b.diagonal(),
    ],
    ids=["slice", "transpose", "view", "expand", "select", "diagonal"],
)
def test_views_alias_base(make_view):
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to("dipu")
    view = make_view(base)
    view_cpu = make_view(base_cpu)
    assert view.shape == view_cpu.shape and view.stride() == view_cpu.stride()
    assert torch.equal(view.cpu(), view_cpu)
    if view_cpu.stride() and 0 in view_cpu.stride():  # expand: write through the un-expanded column
        base[:, 0].mul_(10)
        base_cpu[:, 0].mul_(10)
    else:
        view.add_(100)
        view_cpu.add_(100)
    assert torch.equal(base.cpu(), base_cpu), "in-place write through a view must change the base"
    assert torch.equal(view.cpu(), view_cpu)


def test_inplace_ops():
    x = torch.arange(4.0, device="dipu")
    ptr = x._raw.data_ptr()
    x.mul_(2).add_(1).clamp_(max=5)
    assert torch.equal(x.cpu(), torch.tensor([1.0, 3.0, 5.0, 5.0]))
    assert x._raw.data_ptr() == ptr
    x.zero_()
    assert torch.equal(x.cpu(), torch.zeros(4))
    x.copy_(torch.tensor([4.0, 3.0, 2.0, 1.0]))
    assert torch.equal(x.cpu(), torch.tensor([4.0, 3.0, 2.0, 1.0]))


def test_tensor_and_module_dipu_methods_and_deepcopy():
    t = torch.ones(2).dipu()
    assert t.is_dipu and not torch.ones(2).is_dipu
    m = torch.nn.Linear(3, 2).dipu()
    assert all(p.is_dipu for p in m.parameters())
    m2 = copy.deepcopy(m)
    assert all(p.is_dipu for p in m2.parameters())
    assert m2.weight._raw.data_ptr() != m.weight._raw.data_ptr()
    with torch.no_grad():
        m2.weight.add_(1)
    assert torch.equal(m2.weight.cpu(), m.weight.cpu() + 1)
    c = copy.deepcopy(t)
    c.add_(1)
    assert torch.equal(t.cpu(), torch.ones(2)) and torch.equal(c.cpu(), torch.full((2,), 2.0))


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("dipu")
    assert torch.accelerator.device_count() == torch.dipu.device_count() >= 1
    assert torch.dipu.is_available()


@pytest.mark.parametrize("map_location", ["cpu", "dipu", None])
def test_save_load(map_location):
    model = torch.nn.Linear(4, 3).dipu()
    x = torch.randn(5, device="dipu")
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "x": x}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location=map_location)  # weights_only default
    expected = "cpu" if map_location == "cpu" else "dipu"
    assert loaded["x"].device.type == expected
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    fresh = torch.nn.Linear(4, 3)
    fresh.load_state_dict(loaded["model"])
    assert torch.equal(fresh.weight, model.weight.cpu()) and torch.equal(fresh.bias, model.bias.cpu())
    assert loaded["model"]["weight"].device.type == expected


def test_manual_seed_reproducible():
    def draw():
        dropped = torch.nn.functional.dropout(torch.ones(64, device="dipu"), 0.5)
        return torch.randn(8, device="dipu").cpu(), dropped.cpu()

    torch.manual_seed(123)
    a = draw()
    torch.manual_seed(123)
    b = draw()
    torch.manual_seed(124)
    c = draw()
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    assert set(a[1].unique().tolist()) == {0.0, 2.0}
