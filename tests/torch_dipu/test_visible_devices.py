"""Device count and visibility: droplet's default of one device, ``DROPLET_DEVICE_COUNT``, and
``DIPU_VISIBLE_DEVICES`` (torch_dipu's counterpart of ``CUDA_VISIBLE_DEVICES``). Each case runs in a fresh
interpreter: the selection is read once, at ``import torch_dipu``."""

from __future__ import annotations

import json
import re

import pytest

from torch_dipu.config import parse_visible_devices
from torch_dipu.state import resolve_visible

#: Prints what the process sees, as JSON on the last stdout line.
PROBE = """
import json, torch, torch_dipu
count = torch.dipu.device_count()
print(json.dumps({
    "count": count,
    "available": torch.dipu.is_available(),
    "accelerator": torch.accelerator.device_count(),
    "bus_ids": [torch.dipu.get_device_properties(i).pci_bus_id for i in range(count)],
    "generators": [str(g.device) for g in torch.dipu.default_generators],
}))
"""


def probe(run_python, **env: str) -> dict:
    return json.loads(run_python(PROBE, env=env).stdout.strip().splitlines()[-1])


def test_droplet_has_one_device_unless_asked_for_more(run_python) -> None:
    assert probe(run_python) == {"count": 1, "available": True, "accelerator": 1, "bus_ids": [0],
                                 "generators": ["dipu:0"]}
    got = probe(run_python, DROPLET_DEVICE_COUNT="4")
    assert (got["count"], got["accelerator"], got["bus_ids"]) == (4, 4, [0, 1, 2, 3])
    assert got["generators"] == ["dipu:0", "dipu:1", "dipu:2", "dipu:3"]


def test_visible_devices_select_and_renumber_the_vendors_devices(run_python) -> None:
    got = probe(run_python, DROPLET_DEVICE_COUNT="4", DIPU_VISIBLE_DEVICES="2,0")
    assert (got["count"], got["accelerator"], got["generators"]) == (2, 2, ["dipu:0", "dipu:1"])
    assert got["bus_ids"] == [2, 0]  # dipu:0 is droplet's device 2, dipu:1 its device 0
    assert probe(run_python, DROPLET_DEVICE_COUNT="4", DIPU_VISIBLE_DEVICES=" 3 ")["bus_ids"] == [3]


def test_every_runtime_call_goes_to_the_mapped_device(run_python) -> None:
    """Synchronization, event clocks and capacities reach the vendor with its own index; memory is accounted
    per logical device."""
    out = run_python("""
        import torch, torch_dipu
        from torch_dipu.vendors import droplet
        from torch_dipu.vendors.droplet.runtime import DropletRuntime
        rt = droplet.runtime()
        calls = []
        rt.synchronize = lambda index: calls.append(("sync", index))
        rt.timestamp_ns = lambda index: calls.append(("clock", index)) or 0
        torch.dipu.synchronize(0); torch.dipu.synchronize("dipu:1")
        torch.dipu.Event(enable_timing=True).record(torch.dipu.Stream(device=1))
        assert calls == [("sync", 2), ("sync", 0), ("sync", 0), ("clock", 0)], calls
        # capacities per vendor device (droplet's are equal: make them differ), read again on a switch change
        DropletRuntime.memory_capacity = lambda self, index: (index + 1) << 20
        droplet.configure(faults="")
        assert [torch.dipu.mem_get_info(i)[1] for i in range(2)] == [3 << 20, 1 << 20]
        x = torch.ones(1024, device="dipu:1")
        assert (torch.dipu.memory_allocated(0), torch.dipu.memory_allocated(1)) == (0, 4096)
        assert x.device == torch.device("dipu", 1)
        try:
            torch.ones(2 << 20, device="dipu:1")  # 8 MiB > 1 MiB, the capacity of droplet's device 0
        except torch.OutOfMemoryError as exc:
            assert "dipu:1" in str(exc), exc
        else:
            raise AssertionError("no out-of-memory error")
        try:
            torch.empty(1, device="dipu:2")
        except RuntimeError as exc:
            print("ERR", exc)
        print("OK")
    """, env={"DROPLET_DEVICE_COUNT": "4", "DIPU_VISIBLE_DEVICES": "2,0"}).stdout
    assert "OK" in out
    assert "ERR invalid device dipu:2: 2 devices are visible (dipu:0-1; DIPU_VISIBLE_DEVICES='2,0')" in out


def test_an_index_beyond_the_count_names_the_index_and_the_count(run_python) -> None:
    out = run_python("""
        import torch, torch_dipu
        for make in (lambda: torch.empty(2, device="dipu:3"), lambda: torch.ones(2).to("dipu:3"),
                     lambda: torch.dipu.set_device(3)):
            try:
                make()
            except RuntimeError as exc:
                print("ERR", exc)
    """).stdout
    assert out.count("ERR invalid device dipu:3: droplet has 1 device (dipu:0)") == 3, out


@pytest.mark.parametrize("value", ["", "-1"])
def test_an_empty_selection_hides_every_device(run_python, value: str) -> None:
    assert probe(run_python, DIPU_VISIBLE_DEVICES=value) == {
        "count": 0, "available": False, "accelerator": 0, "bus_ids": [], "generators": []}
    out = run_python("""
        import torch, torch_dipu
        torch.manual_seed(0)  # seeds every dipu generator: there are none
        assert torch.dipu.get_rng_state_all() == [] and torch.dipu.current_device() == 0
        uses = [lambda: torch.empty(2, device="dipu"), lambda: torch.ones(2).to("dipu"), lambda: torch.ones(2).dipu(),
                lambda: torch.nn.Linear(2, 2).to("dipu"), lambda: torch.dipu.memory_allocated(),
                lambda: torch.dipu.synchronize(), lambda: torch.Generator(device="dipu"), lambda: torch.dipu.Stream()]
        for use in uses:
            try:
                use()
            except RuntimeError as exc:
                print("ERR", exc)
    """, env={"DIPU_VISIBLE_DEVICES": value}).stdout
    message = f"ERR no dipu device is visible: DIPU_VISIBLE_DEVICES={value!r} hides every device"
    assert out.count(message) == 8, out


@pytest.mark.parametrize(("value", "message"), [
    ("a", "DIPU_VISIBLE_DEVICES='a': 'a' is not a device index"),
    ("0,x1", "DIPU_VISIBLE_DEVICES='0,x1': 'x1' is not a device index"),
    ("0,,1", "DIPU_VISIBLE_DEVICES='0,,1': '' is not a device index"),
    ("1,0,1", "DIPU_VISIBLE_DEVICES='1,0,1': device 1 is listed twice"),
])
def test_a_malformed_selection_names_the_variable(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_visible_devices(value)


def test_selections_parse_and_resolve() -> None:
    assert parse_visible_devices(None) is None and parse_visible_devices(" -1 ") == parse_visible_devices("") == []
    assert parse_visible_devices(" 2, 0 ") == [2, 0]
    assert resolve_visible(None, 3, "droplet") == [0, 1, 2] and resolve_visible([2, 0], 3, "droplet") == [2, 0]
    with pytest.raises(ValueError, match=re.escape(
            "DIPU_VISIBLE_DEVICES='1,4': device 4 does not exist (droplet has 4 devices: 0-3)")):
        resolve_visible([1, 4], 4, "droplet", "1,4")


@pytest.mark.parametrize(("value", "message"), [
    ("3", "diopi.env.ConfigError: DIPU_VISIBLE_DEVICES='3': device 3 does not exist (droplet has 1 device: 0)"),
    ("0,0", "diopi.env.ConfigError: DIPU_VISIBLE_DEVICES='0,0': device 0 is listed twice"),
])
def test_a_bad_selection_fails_the_import(run_python, value: str, message: str) -> None:
    proc = run_python("import torch_dipu", env={"DIPU_VISIBLE_DEVICES": value}, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == message, proc.stderr


def test_droplet_device_count_switch_must_fit_the_selection(run_python) -> None:
    out = run_python("""
        import torch, torch_dipu
        from torch_dipu.vendors import droplet
        try:
            droplet.configure(device_count=2)
        except ValueError as exc:
            print("ERR", exc)
        assert droplet.runtime().device_count() == 4 and torch.dipu.device_count() == 2  # nothing changed
        droplet.configure(device_count=8)
        assert torch.dipu.device_count() == 2 and torch.dipu.get_device_properties(0).pci_bus_id == 2
        print("OK")
    """, env={"DROPLET_DEVICE_COUNT": "4", "DIPU_VISIBLE_DEVICES": "2,0"}).stdout
    assert "ERR DIPU_VISIBLE_DEVICES='2,0': device 2 does not exist (droplet has 2 devices: 0, 1)" in out
    assert "OK" in out
