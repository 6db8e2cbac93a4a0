"""One case record for every writer: OpCapture and OpAutoCompare build ``case.json`` with ``diopi.case_format``,
so their cases have the same fields (versions included), load and replay."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi import case_format as cf
from op_tools import OpAutoCompare, OpCapture
from op_tools.replay import ReplayOptions, replay_case
from torch_dipu.vendors.droplet import switches


def _linear(backward: bool) -> None:
    x = torch.randn(3, 5, device="dipu", requires_grad=True)
    w = torch.randn(4, 5, device="dipu", requires_grad=True)
    out = torch.nn.functional.linear(x, w)
    if backward:
        out.sum().backward()


def _autocompare_case(tmp_path: Path, fault: str, phase: str) -> Path:
    torch.manual_seed(0)
    with switches(faults=fault), OpAutoCompare(results_dir=tmp_path, run_id="ac", report=False) as tool:
        _linear(backward=True)
    fails = [r for r in tool.failures if r["name"] == "torch.nn.functional.linear" and r["phase"] == phase]
    assert fails and fails[0]["case_dir"], tool.failures
    return tool.run_dir / fails[0]["case_dir"]


def _capture_case(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    with OpCapture(ops="torch.nn.functional.linear", results_dir=tmp_path, run_id="cap") as cap:
        _linear(backward=True)
    (case_json,) = sorted(cap.run_dir.rglob("case.json"))
    return case_json.parent


def _record(case_dir: Path) -> dict:
    return json.loads((case_dir / cf.CASE_FILE).read_text(encoding="utf-8"))


REQUIRED = {"format", "version", "op", "id", "step", "rank", "call_site", "device", "inplace", "random", "mode",
            "versions", "args", "kwargs", "outputs", "tensors", "backward"}


def test_autocompare_and_capture_cases_have_the_same_fields_and_replay(tmp_path: Path) -> None:
    failed = _autocompare_case(tmp_path, "linear|mm:bias:0.5", "forward")
    captured = _capture_case(tmp_path)
    a, c = _record(failed), _record(captured)
    assert set(a) == set(c), set(a) ^ set(c)
    assert set(a) >= REQUIRED
    for record, tool in ((a, "OpAutoCompare"), (c, "OpCapture")):
        assert record["tool"] == tool and record["op"] == "torch.nn.functional.linear"
        assert set(record["versions"]) == {"torch", "ditorch", "python"}
        assert record["versions"]["torch"] == torch.__version__
        assert record["versions"]["python"] == platform.python_version()
        assert cf.device_type(record["device"]) == "dipu" and record["mode"] == "data"
    assert a["reference_outputs"] is not None and c["reference_outputs"] is None
    assert c["backward"] is not None and set(c["backward"]) == {"grad_inputs", "grad_outputs", "tensors"}
    for case_dir in (failed, captured):
        assert cf.load_case(case_dir).op == "torch.nn.functional.linear"
        result = replay_case(case_dir, ReplayOptions(acc_check=True))
        assert result.status == "PASS", (case_dir, result.message)


def test_a_backward_fail_case_has_the_capture_backward_section(tmp_path: Path) -> None:
    failed = _autocompare_case(tmp_path, "mm:grad:2", "backward")
    captured = _capture_case(tmp_path)
    a, c = _record(failed)["backward"], _record(captured)["backward"]
    assert a is not None and set(a) == set(c) == {"grad_inputs", "grad_outputs", "tensors"}
    assert a["grad_inputs"] == c["grad_inputs"] == {"i0": "gi0", "i1": "gi1"}
    assert a["grad_outputs"] == c["grad_outputs"] == {"o0": "go0"}
    for section in (a, c):
        assert {cf.device_type(m["device"]) for m in section["tensors"].values()} == {"dipu"}
    case = cf.load_case(failed)
    assert set(a["tensors"]) <= set(case.data)
    # The fault is off now: the healthy gradients differ from the faulty ones the case recorded.
    result = replay_case(failed)
    assert result.status == "FAIL" and "gradient" in result.message, result.message


def test_build_record_has_every_field_and_copies_versions() -> None:
    record = cf.build_record(tool="t", op="torch.add", call_id=3, step=1, rank=0, call_site="x.py:1 f: y",
                             device="cpu", inplace=False, random=False, mode="data", args=[], kwargs={},
                             outputs=None, tensors={})
    assert REQUIRED | {"tool", "opaque", "reference_outputs", "collective", "replayable"} == set(record)
    assert record["collective"] is None and record["replayable"] is True
    assert record["versions"] == cf.library_versions() and record["versions"] is not cf.library_versions()
    assert record["backward"] is None and record["opaque"] == []
    json.dumps(record, allow_nan=False)


def test_add_gradient_records_layout_on_the_call_device_and_the_data() -> None:
    section, data = cf.backward_section(), {}
    grad = torch.arange(12.0).reshape(3, 4).t()  # non-contiguous
    assert cf.add_gradient(section, data, "grad_inputs", "i1", grad, "dipu:0") == "gi1"
    assert section["grad_inputs"] == {"i1": "gi1"} and section["grad_outputs"] == {}
    assert section["tensors"]["gi1"]["device"] == "dipu:0" and section["tensors"]["gi1"]["stride"] == [1, 4]
    rebuilt = cf.rebuild_tensor(section["tensors"]["gi1"], data["gi1"], "cpu")
    assert torch.equal(rebuilt, grad) and rebuilt.stride() == grad.stride()
