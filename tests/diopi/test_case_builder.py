"""The one case builder (:class:`diopi.case_format.CaseBuilder`, :func:`~diopi.case_format.write_case`): roles,
one record, a case that loads back."""

from __future__ import annotations

from pathlib import Path

import torch

from diopi import case_format as cf


def test_roles_share_one_record_and_the_case_loads_back(tmp_path: Path) -> None:
    x, w = torch.arange(6.0).reshape(2, 3), torch.ones(3, 3)
    case = cf.CaseBuilder()
    case.encode_call((x, [w, x]), {"alpha": 2.0, "scale": x})
    outputs = case.encode("o", x @ w)
    reference = case.encode("r", (x @ w).double())
    assert case.args == [{"tensor": "i0"}, [{"tensor": "i1"}, {"tensor": "i0"}]]  # one key per tensor object
    assert case.kwargs == {"alpha": 2.0, "scale": {"tensor": "i0"}}
    assert sorted(case.meta) == sorted(case.data) == ["i0", "i1", "o0", "r0"]
    record = case.record(tool="test", op="torch.matmul", call_id=7, step=1, rank=0, call_site=None, device="cpu",
                         inplace=False, random=False, mode="data", outputs=outputs, reference_outputs=reference)
    assert record["tensors"] == case.meta and record["opaque"] == [] and record["id"] == 7
    written = cf.write_case(tmp_path / "a" / "7", record, case.data)
    assert written > 0 and sorted(p.name for p in (tmp_path / "a" / "7").iterdir()) == [cf.CASE_FILE, cf.TENSORS_FILE]
    loaded = cf.load_case(tmp_path / "a" / "7")
    assert loaded.op == "torch.matmul" and torch.equal(loaded.data["i0"], x.reshape(-1))
    assert torch.equal(loaded.data["r0"], (x @ w).double().reshape(-1))


def test_opaque_values_of_every_role_are_recorded(tmp_path: Path) -> None:
    case = cf.CaseBuilder()
    case.encode_call((object(),), {})
    case.encode("o", {1: 2})  # a dict with a non-string key is opaque too
    record = case.record(tool="t", op="f", call_id=0, step=0, rank=0, call_site=None, device="cpu", inplace=False,
                         random=False, mode="data", outputs=None)
    assert record["opaque"] == ["builtins.object", "builtins.dict"]
    cf.write_case(tmp_path / "c", record, None)  # no tensors file when there is no data
    assert [p.name for p in (tmp_path / "c").iterdir()] == [cf.CASE_FILE]
