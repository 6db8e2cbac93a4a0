"""Every built-in adapter proven without hardware: one subprocess per fake vendor (fake_vendors/<setup>).

Each working fake (fake_vendors/_common/fake_vendor.py) registers a pure-Python PrivateUse1 device, its
``torch.<device>`` module, storage-less ``empty`` kernels and its collective backend (gloo process groups
under the vendor's name), so detection, the ``torch.cuda``/``"cuda"`` mapping and ``"nccl"`` are checked
end to end. The native adapters (cuda, xpu, mps) are checked as far as a CPU-only torch allows.
"""

from __future__ import annotations

import json
import re

import pytest
from vendor_env import run_python

BANNER = re.compile(r"^ditorch: (.+) (\S+):(\S+) pid: (\d+)$")

#: What ``import ditorch`` did with one fake vendor, as JSON on the last stdout line.
VENDOR_PROBE = """
import json, os, sys
import torch
import ditorch
import torch.distributed as dist
from ditorch import mocking

a = ditorch.adapter
tr = mocking.installed().translator
out = {
    "pid": os.getpid(),
    "adapter": a.name, "framework": a.framework, "device_type": a.device_type, "dist_backend": a.dist_backend,
    "failures": [list(f) for f in ditorch.failures],
    "imported": sorted(m for m in ("torch_npu", "torch_mlu", "torch_musa", "torch_br", "torch_dipu")
                       if m in sys.modules),
    "privateuse1": torch._C._get_privateuse1_backend_name(),
    "is_available": torch.cuda.is_available(),
    "device_count": torch.cuda.device_count(),
    "device_name": torch.cuda.get_device_name(0),
    "translated": [tr.device("cuda:1"), str(tr.device(torch.device("cuda", 1))), tr.device("cpu")],
    "empty": str(torch.empty(2, 3, device="cuda:1").device),
    "empty_device": str(torch.empty(2, device=torch.device("cuda", 2)).device),
    "is_cuda": torch.empty(1, device="cuda").is_cuda,
}
torch.cuda.set_device("cuda:2")
out["current_device"] = torch.cuda.current_device()
out["empty_current"] = str(torch.empty(1, device="cuda").device)
dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
out["init_backend"] = dist.get_backend()
out["new_group_backend"] = dist.get_backend(dist.new_group([0], backend="nccl"))
dist.destroy_process_group()
print(json.dumps(out))
"""

VENDORS = [
    # setup, adapter, framework, device type, collective backend, devices, device name, version
    ("npu", "npu", "torch_npu", "npu", "hccl", 2, "Fake Ascend 910B", "2.1.0.fake"),
    ("mlu", "mlu", "torch_mlu", "mlu", "cncl", 3, "Fake Cambricon MLU370", "1.17.0.fake"),
    ("musa", "musa", "torch_musa", "musa", "mccl", 3, "Fake MTT S4000", "1.3.0.fake"),
    ("biren", "biren", "torch_br", "supa", "bccl", 3, "Fake Biren BR104", "0.5.0.fake"),
]


@pytest.mark.parametrize(("setup", "name", "framework", "device", "backend", "count", "device_name", "version"),
                         VENDORS, ids=[v[0] for v in VENDORS])
def test_fake_vendor_is_detected_and_mapped(setup, name, framework, device, backend, count, device_name, version):
    proc = run_python("-c", VENDOR_PROBE, setups=(setup,))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # detection: the vendor's own plugin wins over torch_dipu, which is never imported
    assert (got["adapter"], got["framework"], got["device_type"], got["dist_backend"]) == (
        name, framework, device, backend)
    assert got["imported"] == [framework] and got["failures"] == []
    assert got["privateuse1"] == device
    [banner] = [m for m in map(BANNER.match, proc.stderr.splitlines()) if m]
    assert banner.groups() == (device_name, framework, version, str(got["pid"]))
    assert proc.stderr.splitlines() == [banner.string]
    # torch.cuda answers from the fake's torch.<device>
    assert (got["is_available"], got["device_count"], got["device_name"]) == (True, count, device_name)
    # "cuda:N" and torch.device("cuda", N) become the fake device with the same index
    assert got["translated"] == [f"{device}:1", f"{device}:1", "cpu"]
    assert (got["empty"], got["empty_device"], got["is_cuda"]) == (f"{device}:1", f"{device}:2", True)
    assert (got["current_device"], got["empty_current"]) == (2, f"{device}:2")
    # "nccl" is initialized as the vendor's collective backend
    assert (got["init_backend"], got["new_group_backend"]) == (backend, backend)


NATIVE = [("cuda", "nccl"), ("xpu", "xccl"), ("mps", "gloo")]


def test_adapter_table_lists_every_builtin_with_its_backend():
    code = ("import json; import ditorch; from ditorch.detect import load_adapters; "
            "print(json.dumps({a.name: [a.framework, a.device_type, a.dist_backend, a.is_native] "
            "for a in load_adapters()[0]}))")
    proc = run_python("-c", code, DITORCH_VENDOR="cpu", DITORCH_QUIET="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        **{v[1]: [v[2], v[3], v[4], False] for v in VENDORS},
        **{n: ["torch", n, b, True] for n, b in NATIVE},
        "dipu": ["torch_dipu", "dipu", "dicl", False],
    }


@pytest.mark.parametrize("vendor", [n for n, _ in NATIVE])
def test_forcing_a_native_backend_without_its_device_is_one_clear_error(vendor):
    proc = run_python("-c", "import ditorch", DITORCH_VENDOR=vendor)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"ditorch.detect.DetectionError: DITORCH_VENDOR={vendor}: torch imported but reports no "
                    f"usable {vendor} device"), proc.stderr
    assert proc.stderr.count("DITORCH_VENDOR=") == 1


#: Install the mocking for one native adapter by hand (no device here), with init_process_group captured.
NATIVE_PROBE = """
import json, sys
import torch
import torch.distributed as dist
seen = []
dist.init_process_group = lambda *args, **kwargs: seen.append(args[0] if args else kwargs.get("backend"))
import ditorch
from ditorch import mocking
from ditorch.adapters import builtin
mocking.install(getattr(builtin, sys.argv[1])())
state = mocking.installed()
dist.init_process_group("nccl")
dist.init_process_group(backend="cuda:nccl,cpu:gloo")
print(json.dumps({"installed": state is not None,
                  "translated": state and [state.translator.device("cuda:1"),
                                           str(state.translator.device(torch.device("cuda", 1)))],
                  "backends": seen}))
"""


@pytest.mark.parametrize(("vendor", "expected"), [
    ("cuda", {"installed": False, "translated": None, "backends": ["nccl", "cuda:nccl,cpu:gloo"]}),
    ("xpu", {"installed": True, "translated": ["xpu:1", "xpu:1"], "backends": ["xccl", "xpu:xccl,cpu:gloo"]}),
    ("mps", {"installed": True, "translated": ["mps:1", "mps:1"], "backends": ["gloo", "gloo"]}),
])
def test_native_adapter_mapping_without_hardware(vendor, expected):
    proc = run_python("-c", NATIVE_PROBE, vendor, DITORCH_VENDOR="cpu", DITORCH_QUIET="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected
