"""Tensor metadata that changes under a write (out=, resize_, unsqueeze_), printing, torch.accelerator."""

from __future__ import annotations

import pytest
import torch

from torch_dipu.vendors import droplet


def test_out_argument_of_the_wrong_size_is_resized() -> None:
    a = torch.arange(6.0).reshape(2, 3)
    out = torch.empty(0, device="dipu")
    before = torch.dipu.memory_allocated()
    result = torch.add(a.to("dipu"), 1, out=out)
    assert result is out
    assert out.shape == (2, 3)
    assert torch.equal(out.cpu(), a + 1)
    assert torch.dipu.memory_allocated() - before == 512  # 6 * 4 bytes in a block rounded to 512, as CUDA's


def test_out_tuple_of_the_wrong_size_is_resized() -> None:
    values, indices = torch.empty(0, device="dipu"), torch.empty(0, dtype=torch.long, device="dipu")
    data = torch.tensor([3.0, 1.0, 2.0])
    torch.sort(data.to("dipu"), out=(values, indices))
    assert torch.equal(values.cpu(), torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(indices.cpu(), torch.tensor([1, 2, 0]))


@pytest.mark.parametrize(
    ("method", "args", "shape"),
    [("unsqueeze_", (0,), (1, 2, 3)), ("t_", (), (3, 2)), ("squeeze_", (), (2, 3)), ("resize_", ((3, 2),), (3, 2))],
)
def test_in_place_metadata_operators_update_the_tensor(method: str, args: tuple, shape: tuple) -> None:
    base = torch.arange(6.0).reshape(2, 3)
    x = base.to("dipu")
    getattr(x, method)(*args)
    expected = getattr(base.clone(), method)(*args)
    assert x.shape == shape == expected.shape
    assert x.stride() == expected.stride()
    assert torch.equal(x.cpu(), expected)


def test_factories_built_from_out_calls() -> None:
    assert torch.equal(torch.arange(1, 7, 2, device="dipu").cpu(), torch.tensor([1, 3, 5]))
    assert torch.equal(torch.eye(2, 3, device="dipu").cpu(), torch.eye(2, 3))


def test_printing_needs_no_float64_kernels() -> None:
    x = torch.tensor([[1.5, -2.0], [0.25, 3.0]], device="dipu")
    with droplet.switches(unsupported_dtypes={torch.float64}):
        text = repr(x)
    assert text == "tensor([[ 1.5000, -2.0000],\n        [ 0.2500,  3.0000]], device='dipu:0')"


def test_parameter_prints_like_cuda() -> None:
    p = torch.nn.Parameter(torch.ones(2, device="dipu"))
    assert repr(p) == "Parameter containing:\ntensor([1., 1.], device='dipu:0', requires_grad=True)"


def test_device_count_changes_with_droplet_configure() -> None:
    assert torch.dipu.device_count() == 1  # droplet's default
    with droplet.switches(device_count=3):
        assert torch.dipu.device_count() == torch.accelerator.device_count() == 3
        assert [g.device.index for g in torch.dipu.default_generators] == [0, 1, 2]
        x = torch.ones(8, device="dipu:2")
        assert (torch.dipu.memory_allocated(2), torch.dipu.memory_allocated(1)) == (512, 0)  # 32 bytes: one block
        torch.dipu.set_device(2)
    assert torch.dipu.device_count() == 1 and torch.dipu.current_device() == 0
    assert len(torch.dipu.default_generators) == 1
    with pytest.raises(RuntimeError, match=r"invalid device dipu:2: droplet has 1 device \(dipu:0\)"):
        torch.empty(1, device="dipu:2")
    del x


def test_accelerator_device_index_and_synchronize_follow_torch_dipu(four_dipu_devices) -> None:
    assert torch.accelerator.current_accelerator().type == "dipu"
    torch.dipu.set_device(2)
    assert torch.accelerator.current_device_index() == 2
    torch.accelerator.set_device_index(1)
    assert torch.dipu.current_device() == 1
    with torch.accelerator.device_index(3):
        assert torch.randn(1, device="dipu").device == torch.device("dipu", 3)
    assert torch.accelerator.current_device_index() == 1
    torch.accelerator.synchronize()  # raised "Backend doesn't support synchronizing" before routing


def test_inplace_lost_also_drops_foreach_writes() -> None:
    params = [torch.ones(3, device="dipu"), torch.ones(2, device="dipu")]
    with droplet.switches(faults="_foreach_add_.*:inplace_lost"):
        torch._foreach_add_(params, 1.0)
    assert all(torch.equal(p.cpu(), torch.ones_like(p.cpu())) for p in params)
    torch._foreach_add_(params, 1.0)
    assert all(torch.equal(p.cpu(), torch.full_like(p.cpu(), 2.0)) for p in params)


@pytest.mark.parametrize(
    "call",
    [lambda d, h: d + h, lambda d, h: torch.cat([d, h]), lambda d, h: torch.mm(d.view(3, 1), h.view(1, 3)),
     lambda d, h: torch.add(d, d, alpha=1, out=h)],
    ids=["add", "cat", "mm", "out"],
)
def test_host_tensors_mixed_with_dipu_tensors_are_rejected(call) -> None:  # noqa: ANN001
    d, h = torch.ones(3, device="dipu"), torch.ones(3)
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*dipu:0 and cpu"):
        call(d, h)


def test_host_scalars_indices_and_copies_are_accepted() -> None:
    d = torch.arange(4.0).to("dipu")
    assert torch.equal((d * torch.tensor(2.0)).cpu(), torch.arange(4.0) * 2)  # 0-dim host tensor
    assert torch.equal(d[torch.tensor([0, 3])].cpu(), torch.tensor([0.0, 3.0]))  # host index tensor
    host = torch.zeros(4)
    host.copy_(d)
    d.copy_(torch.full((4,), 7.0))
    assert torch.equal(host, torch.arange(4.0))
    assert torch.equal(d.cpu(), torch.full((4,), 7.0))


def test_numpy_asks_for_a_host_copy_like_cuda() -> None:
    t = torch.arange(3.0).to("dipu")
    with pytest.raises(TypeError, match=r"can't convert dipu:0 device type tensor to numpy"):
        t.numpy()
    assert t.numpy(force=True).tolist() == [0.0, 1.0, 2.0]
    assert t.cpu().numpy().tolist() == [0.0, 1.0, 2.0]


def test_tensors_on_two_dipu_devices_are_rejected(four_dipu_devices) -> None:
    a, b = torch.ones(3, device="dipu:0"), torch.ones(3, device="dipu:1")
    with pytest.raises(RuntimeError, match=r"two devices, dipu:0 and dipu:1"):
        a + b
    with pytest.raises(RuntimeError, match=r"two devices, dipu:1 and dipu:0"):
        torch.cat([b, a])
    assert (b + b).device == torch.device("dipu", 1)


def test_invalid_device_index_names_the_device() -> None:
    with pytest.raises(RuntimeError, match=r"invalid device dipu:99"):
        torch.zeros_like(torch.ones(2, device="dipu"), device="dipu:99")
    with pytest.raises(RuntimeError, match=r"invalid device dipu:99"):
        torch.dipu.Stream(device=99)


def test_data_ptr_is_the_storage_address() -> None:
    t = torch.arange(4.0).to("dipu")
    assert t.data_ptr() == t._raw.data_ptr() != 0
    assert t[1:].data_ptr() == t.data_ptr() + 4


def test_generator_taken_by_position() -> None:
    rates = torch.full((1000,), 3.0)
    drawn = torch.poisson(rates.to("dipu"), generator=torch.Generator().manual_seed(0)).cpu()
    assert torch.equal(drawn, torch.poisson(rates, generator=torch.Generator().manual_seed(0)))
    assert abs(torch.poisson(rates.to("dipu")).mean().item() - 3.0) < 0.3  # the device's own generator
