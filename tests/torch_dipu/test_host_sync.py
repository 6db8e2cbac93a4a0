"""Host synchronisations (torch_dipu.host_sync): each kind counted once per user-visible operation, nothing
counted for work that stays on the device, the sync debug modes, and counts per device."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

import torch_dipu  # noqa: F401
from torch_dipu import host_sync
from torch_dipu.host_sync import KINDS, counting


@pytest.fixture(autouse=True)
def default_mode() -> Iterator[None]:
    yield
    torch.dipu.set_sync_debug_mode(0)


def _x() -> torch.Tensor:
    return torch.tensor([[1.0, -2.0, 3.0], [0.0, 5.0, -6.0]], device="dipu")


def _recorded_event() -> torch.dipu.Event:
    event = torch.dipu.Event()
    event.record()
    return event


# (case, what it runs on a dipu tensor x, the kind it must count exactly once)
COUNTED: list[tuple[str, Callable[[torch.Tensor], object], str]] = [
    ("cpu", lambda x: x.cpu(), "copy_d2h"),
    ("to_cpu", lambda x: x.to("cpu"), "copy_d2h"),
    ("cpu_non_contiguous", lambda x: x.t().cpu(), "copy_d2h"),
    ("copy_into_host", lambda x: torch.empty(2, 3).copy_(x), "copy_d2h"),
    ("tolist", lambda x: x.tolist(), "copy_d2h"),
    ("numpy_force", lambda x: x.numpy(force=True), "copy_d2h"),
    ("print", lambda x: repr(x), "copy_d2h"),
    ("copy_from_host", lambda x: x.copy_(torch.ones(2, 3)), "copy_h2d"),
    ("to_dipu", lambda x: torch.ones(3).to("dipu"), "copy_h2d"),
    ("tensor_on_dipu", lambda x: torch.tensor([1.0, 2.0], device="dipu"), "copy_h2d"),
    ("item", lambda x: x[0, 0].item(), "item"),
    ("bool", lambda x: bool(x[0, 0] > 0), "item"),
    ("float", lambda x: float(x[0, 1]), "item"),
    ("is_nonzero", lambda x: x[0, 0].is_nonzero(), "item"),
    ("equal", lambda x: torch.equal(x, x), "item"),
    ("nonzero", lambda x: x.nonzero(), "data_dependent"),
    ("boolean_mask", lambda x: x[x > 0], "data_dependent"),
    ("boolean_mask_write", lambda x: x.__setitem__(x > 0, 0.0), "data_dependent"),
    ("masked_select", lambda x: x.masked_select(x > 0), "data_dependent"),
    ("where_one_argument", lambda x: torch.where(x > 0), "data_dependent"),
    ("argwhere", lambda x: torch.argwhere(x), "data_dependent"),
    ("unique", lambda x: torch.unique(x), "data_dependent"),
    ("repeat_interleave", lambda x: torch.repeat_interleave((x > 0).long().reshape(-1)), "data_dependent"),
    ("synchronize", lambda x: torch.dipu.synchronize(), "synchronize"),
    ("accelerator_synchronize", lambda x: torch.accelerator.synchronize(), "synchronize"),
    ("stream_synchronize", lambda x: torch.dipu.current_stream().synchronize(), "synchronize"),
    ("event_synchronize", lambda x: _recorded_event().synchronize(), "event_sync"),
]


@pytest.mark.parametrize(("case", "run", "kind"), COUNTED, ids=[c[0] for c in COUNTED])
def test_each_kind_counted_once(case: str, run: Callable[[torch.Tensor], object], kind: str) -> None:
    x = _x()
    before = torch.dipu.synchronize_counts()
    with counting() as counts:
        run(x)
    assert counts.total == 1, counts
    assert counts.by_kind[kind] == 1
    after = torch.dipu.synchronize_counts()
    assert after[kind] == before[kind] + 1 and sum(after.values()) == sum(before.values()) + 1


NOT_COUNTED: list[tuple[str, Callable[[torch.Tensor], object]]] = [
    ("device_ops", lambda x: (x * 2 + 1).sum(dim=0).exp()),
    ("dtype_cast", lambda x: x.half().float()),
    ("copy_within_device", lambda x: x.clone().copy_(x)),
    ("empty_to_host", lambda x: x[:0].cpu()),
    ("pinned_non_blocking", lambda x: torch.ones(3).pin_memory().to("dipu", non_blocking=True)),
    ("repeat_interleave_sized", lambda x: torch.repeat_interleave(x[0].abs().long(), output_size=6)),
    ("integer_index", lambda x: x[:, x[1].abs().long() % 3]),
    ("event_record_and_device_waits", lambda x: (lambda e: (e.wait(), torch.dipu.current_stream().wait_event(e),
                                                            torch.dipu.current_stream().wait_stream(
                                                                torch.dipu.Stream())))(_recorded_event())),
]


@pytest.mark.parametrize(("case", "run"), NOT_COUNTED, ids=[c[0] for c in NOT_COUNTED])
def test_work_that_stays_on_the_device_is_not_counted(case: str, run: Callable[[torch.Tensor], object]) -> None:
    x = _x()
    with counting() as counts:
        run(x)
    assert counts.total == 0, counts


def test_a_training_step_without_item_does_not_synchronize() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to("dipu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 6, device="dipu"), torch.randn(8, 3, device="dipu")
    with counting() as counts:
        for _ in range(2):
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert counts.total == 0, counts
    with counting() as counts:
        loss.item()
    assert counts.by_kind == {**dict.fromkeys(KINDS, 0), "item": 1}


def test_debug_mode_warns_then_raises() -> None:
    x = _x()
    assert torch.dipu.get_sync_debug_mode() == 0
    torch.dipu.set_sync_debug_mode("warn")
    assert torch.dipu.get_sync_debug_mode() == 1
    with warnings.catch_warnings(record=True) as caught, counting() as counts:
        warnings.simplefilter("always")
        x.nonzero()
        x + 1
    assert counts.total == 1
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1 and "aten.nonzero" in messages[0] and "data_dependent" in messages[0]
    assert caught[0].filename == __file__  # the warning points at the user's line
    torch.dipu.set_sync_debug_mode(2)
    with counting() as counts:
        with pytest.raises(RuntimeError, match=r"synchronizing dipu operation: aten\._local_scalar_dense.*item"):
            x[0, 0].item()
        assert (x * 2).shape == (2, 3)  # device work still runs
    assert counts.total == 0
    torch.dipu.set_sync_debug_mode("default")
    assert x[0, 0].item() == 1.0
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.dipu.set_sync_debug_mode("loud")


def test_counts_are_per_device(four_dipu_devices: int) -> None:
    a = torch.ones(3, device="dipu:1")
    b = torch.ones(3, device="dipu:2")
    before = {i: torch.dipu.synchronize_count(i) for i in range(four_dipu_devices)}
    with counting() as counts:
        a.cpu()
        a.sum().item()
        b.cpu()
        torch.dipu.synchronize("dipu:3")
    after = {i: torch.dipu.synchronize_count(i) for i in range(four_dipu_devices)}
    assert {i: after[i] - before[i] for i in after} == {0: 0, 1: 2, 2: 1, 3: 1}
    assert counts.by_device == {1: 2, 2: 1, 3: 1} and counts.total == 4
    assert counts.by_kind["copy_d2h"] == 2 and counts.by_kind["item"] == 1 and counts.by_kind["synchronize"] == 1
    assert set(torch.dipu.synchronize_counts(torch.device("dipu", 1))) == set(KINDS)


def test_counting_block_is_fixed_once_closed() -> None:
    x = _x()
    with counting() as counts:
        x.cpu()
        assert counts.total == 1  # live inside the block
    x.cpu()
    assert counts.total == 1 and "copy_d2h=1" in repr(counts)


def test_only_synchronising_overloads_are_wrapped() -> None:
    """The cost when nobody looks: the handlers of operators that never synchronise are not wrapped."""
    ops = torch.ops.aten
    assert host_sync.handler_wrapper(ops.add.Tensor, "add") is None
    assert host_sync.handler_wrapper(ops.mm.default, "mm") is None
    assert host_sync.handler_wrapper(ops.where.self, "where") is None
    assert host_sync.handler_wrapper(ops.repeat_interleave.self_int, "repeat_interleave") is None
    assert host_sync.handler_wrapper(ops.nonzero.default, "nonzero") is not None
    assert host_sync.handler_wrapper(ops.add.Tensor, "add", fallback=True) is not None
