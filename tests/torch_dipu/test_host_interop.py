"""The seams torch_dipu adds where PyTorch leaves work to C++ backends: generators, pinned memory, storages.

Workflow-level parity (training with these) is in test_workflows.py; these check the mechanisms' edges and
that CPU tensors and generators stay exactly PyTorch's.
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import torch_dipu
from torch_dipu import pinned, storage


def test_generators_per_device_and_copies(four_dipu_devices) -> None:
    g = torch.Generator(device="dipu:1")
    assert isinstance(g, torch_dipu.DipuGenerator) and isinstance(g, torch.Generator) and g.device.index == 1
    assert type(torch.Generator()) is torch._C.Generator and torch.Generator().device.type == "cpu"
    assert torch.Generator(device=1).device == torch.device("dipu", 1)  # an index of the current accelerator
    assert isinstance(torch.default_generator, torch.Generator)
    assert [d.device for d in torch.dipu.default_generators] == [
        torch.device("dipu", i) for i in range(torch.dipu.device_count())
    ]
    g.manual_seed(5)
    x = torch.randn(3, device="dipu:1", generator=g)
    for other in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert type(other) is torch_dipu.DipuGenerator and other.device == g.device
        assert torch.equal(other.get_state(), g.get_state())
    g.manual_seed(5)
    assert torch.equal(torch.randn(3, device="dipu:1", generator=g).cpu(), x.cpu())
    with pytest.raises(RuntimeError, match="invalid device dipu:99"):
        torch.Generator(device="dipu:99")


def test_checkpoint_sees_an_initialized_device_module() -> None:
    assert torch.dipu._initialized is True  # torch.utils.checkpoint stashes device RNG only then


def test_pin_memory_is_served_for_dipu_and_pytorchs_otherwise() -> None:
    x = torch.arange(24.0).view(4, 6)
    view = x.t()[1:]
    pinned_view = view.pin_memory()
    assert pinned_view.is_pinned() and pinned_view.is_pinned("dipu") and not view.is_pinned()
    assert pinned_view.stride() == view.stride() and pinned_view.storage_offset() == 0
    assert torch.equal(pinned_view, view) and pinned_view.pin_memory() is pinned_view
    assert pinned.is_pinned_by_dipu(pinned_view[1:])  # views of pinned memory are pinned
    assert not torch.ones(2, device="dipu").is_pinned()  # device tensors are never pinned, as on CUDA
    with pytest.raises(RuntimeError, match="not an accelerator"):
        x.pin_memory("cpu")  # PyTorch's own kernel answers other devices
    assert torch.equal(pinned_view.to("dipu", non_blocking=True).cpu(), view)
    assert torch.empty(0).pin_memory().is_pinned()


def test_storage_set_and_errors() -> None:
    t = torch.arange(8.0, device="dipu")
    s = t.untyped_storage()
    assert t.view(2, 4).untyped_storage() is s  # one storage object for a tensor and its views
    rebuilt = torch.empty(0, device="dipu").set_(s, 2, (2, 2), (1, 2))
    assert torch.equal(rebuilt.cpu(), torch.tensor([[2.0, 4.0], [3.0, 5.0]]))
    rebuilt.fill_(-1.0)
    assert t[2:6].tolist() == [-1.0] * 4
    s.copy_(torch.zeros(8).untyped_storage())
    assert not t.cpu().any()
    assert storage.host_storage(s) is t._raw.untyped_storage()
    empty = torch.empty(0, device="dipu")
    assert empty.untyped_storage().nbytes() == 0 and empty.untyped_storage().cpu().nbytes() == 0
    stranger = torch._C._construct_storage_from_data_pointer(12345678, torch.device("dipu"), 16)
    with pytest.raises(RuntimeError, match="not made by torch_dipu"):
        torch.empty(0, device="dipu").set_(stranger)


def test_checkpoint_from_cpu_loads_on_each_dipu_device(tmp_path, four_dipu_devices) -> None:
    shared = torch.arange(6.0)
    torch.save({"a": shared, "b": shared[2:]}, tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", map_location="dipu:1", weights_only=True)
    assert {v.device for v in loaded.values()} == {torch.device("dipu", 1)}
    assert loaded["b"].data_ptr() == loaded["a"].data_ptr() + 8  # the shared storage stays shared
    loaded["a"][3] = 100.0
    assert loaded["b"][1].item() == 100.0
