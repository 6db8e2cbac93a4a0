"""The conformance command line: count, gen, run; reports; shards and workers; device config; bad input."""

from __future__ import annotations

import csv
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from diopi.conformance.device_config import DeviceConfigError, load_device_config


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_count_prints_functions_cases_and_families(run_cli, tmp_path):
    status, out, _ = run_cli("count", "--data", str(tmp_path))
    lines = out.splitlines()
    assert status == 0
    assert lines[0].startswith("8 functions, ") and "estimated: 2 functions" in lines[0]
    assert any(line.split()[:3] == ["elementwise", "2", "functions"] for line in lines[1:])
    status, out, _ = run_cli("count", "--functions", "diopiMul")
    assert out.splitlines()[0] == "1 functions, 39 cases"


def test_gen_then_run_cpu_passes_and_writes_reports(run_cli, tmp_path):
    data = tmp_path / "data"
    status, out, _ = run_cli("gen", "--data", str(data), "--functions", "diopiMul,diopiSilu.*,diopiLayerNorm")
    assert status == 0 and "to " + str(data) in out
    assert sorted(p.name for p in data.iterdir()) == ["diopiLayerNorm", "diopiMul", "diopiSilu", "diopiSiluBackward"]
    status, out, _ = run_cli("count", "--data", str(data), "--functions", "diopiSilu.*|diopiLayerNorm")
    assert "estimated" not in out and out.startswith("3 functions, 17 cases")
    junit, table, page = tmp_path / "r.xml", tmp_path / "r.csv", tmp_path / "r.html"
    status, out, _ = run_cli("run", "--device", "cpu", "--data", str(data), "--functions",
                             "diopiMul,diopiSilu.*,diopiLayerNorm", "--junit", str(junit), "--csv", str(table),
                             "--html", str(page))
    assert status == 0, out
    rows = _csv(table)
    assert len(rows) == 39 + 10 + 5 + 2 and {r["outcome"] for r in rows} == {"PASS"}
    assert out.splitlines()[-1] == f"{len(rows)} cases: PASS {len(rows)}, FAIL 0, SKIP 0, NOT_IMPLEMENTED 0, ERROR 0"
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(rows) and suite.get("failures") == "0"
    assert {c.get("classname") for c in cases} == {"diopiMul", "diopiSilu", "diopiSiluBackward", "diopiLayerNorm"}
    assert cases[0].get("name") == "diopiMul/0000"
    html = page.read_text()
    assert "diopiSiluBackward" in html and "<script" not in html and "http" not in html


def test_droplet_fault_fails_exactly_the_faulty_function(run_cli, data_dir, tmp_path, monkeypatch):
    junit, table = tmp_path / "r.xml", tmp_path / "r.csv"
    args = ("run", "--impl", "droplet", "--data", str(data_dir), "--csv", str(table), "--junit", str(junit))
    status, out, _ = run_cli(*args)
    assert status == 0 and {r["outcome"] for r in _csv(table)} == {"PASS"}
    status, out, _ = run_cli(*args, "--impl-option", "faults=mul.Tensor:bias")
    assert status == 1
    rows = _csv(table)
    failed = [r for r in rows if r["outcome"] == "FAIL"]
    # the bias fault changes floating-point results: exactly diopiMul's floating cases of mul.Tensor
    assert {r["case"] for r in failed} == {r["case"] for r in rows if r["function"] == "diopiMul"
                                           and r["op"] == "aten.mul.Tensor" and r["dtype"] != "int64"}
    assert "FAIL diopiMul/0000 (aten.mul.Tensor, float32, contiguous)" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    failing = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert len(failing) == len(failed) and {c.get("classname") for c in failing} == {"diopiMul"}
    assert "outside atol" in failing[0].find("failure").get("message")
    monkeypatch.setenv("DROPLET_FAULTS", "add.Tensor:bias")
    status, out, _ = run_cli(*args)
    assert status == 1 and {r["function"] for r in _csv(table) if r["outcome"] == "FAIL"} == {"diopiAdd"}


def test_shards_cover_every_case_once_and_workers_agree(run_cli, data_dir, tmp_path):
    full = tmp_path / "full.csv"
    some = ("--functions", "diopiMul|diopiSilu.*|diopiNormal")
    assert run_cli("run", "--impl", "droplet", "--data", str(data_dir), *some, "--csv", str(full))[0] == 0
    everything = [r["case"] for r in _csv(full)]
    parts = []
    for i in (1, 2, 3):
        part = tmp_path / f"{i}.csv"
        assert run_cli("run", "--impl", "droplet", "--data", str(data_dir), *some, "--shard", f"{i}/3", "--csv",
                       str(part))[0] == 0
        parts.append([r["case"] for r in _csv(part)])
    assert sorted(sum(parts, [])) == sorted(everything) and len(set(sum(parts, []))) == len(everything)
    assert all(parts)
    pooled = tmp_path / "pooled.csv"
    assert run_cli("run", "--impl", "droplet", "--data", str(data_dir), "--workers", "2", "--functions",
                   "diopiMul|diopiNormal", "--csv", str(pooled))[0] == 0
    rows = _csv(pooled)
    assert [r["case"] for r in rows] == [c for c in everything if c.startswith(("diopiMul/", "diopiNormal/"))]
    assert {r["outcome"] for r in rows} == {"PASS"}


def test_a_corrupted_case_is_an_error_and_the_others_still_run(run_cli, data_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(data_dir / "diopiSilu", data / "diopiSilu")
    (data / "diopiSilu" / "0003" / "tensors.safetensors").write_bytes(b"not a safetensors file")
    (data / "diopiSilu" / "0005" / "case.json").write_text("{")
    table = tmp_path / "r.csv"
    status, out, _ = run_cli("run", "--impl", "droplet", "--data", str(data), "--functions", "diopiSilu", "--csv",
                             str(table))
    assert status == 1
    rows = {r["case"]: r for r in _csv(table)}
    assert len(rows) == 10 and rows["diopiSilu/0003"]["outcome"] == "ERROR"
    assert "tensors.safetensors: not a readable safetensors file" in rows["diopiSilu/0003"]["detail"]
    assert "case.json: not valid JSON" in rows["diopiSilu/0005"]["detail"]
    assert [c for c, r in rows.items() if r["outcome"] != "PASS"] == ["diopiSilu/0003", "diopiSilu/0005"]


def test_missing_reference_data_names_the_case_and_says_to_run_gen(run_cli, data_dir, tmp_path):
    status, _, err = run_cli("run", "--device", "cpu", "--data", str(tmp_path / "none"), "--functions", "diopiMul")
    assert status == 2
    assert err.strip() == (f"diopi.conformance run: error: no reference data for case diopiMul/0000 in "
                           f"{tmp_path / 'none'}: run `python -m diopi.conformance gen --data {tmp_path / 'none'}` "
                           f"first (gen names the cases whose reference it cannot compute)")
    data = tmp_path / "data"
    shutil.copytree(data_dir / "diopiSilu", data / "diopiSilu")
    shutil.rmtree(data / "diopiSilu" / "0002")
    table = tmp_path / "r.csv"
    status, out, _ = run_cli("run", "--device", "cpu", "--data", str(data), "--functions", "diopiSilu|diopiLayerNorm",
                             "--csv", str(table))
    assert status == 1
    errors = {r["case"]: r["detail"] for r in _csv(table) if r["outcome"] == "ERROR"}
    assert set(errors) == {"diopiSilu/0002", "diopiLayerNorm/*"}
    assert "no reference data for case diopiSilu/0002" in errors["diopiSilu/0002"] and "gen" in errors["diopiSilu/0002"]
    assert "recorded cases of diopiLayerNorm" in errors["diopiLayerNorm/*"]


def test_unknown_pattern_vendor_device_are_one_clear_error(run_cli, data_dir):
    cases = [
        (("run", "--impl", "droplet", "--functions", "diopiNope.*"), "--functions 'diopiNope.*' matches no function"),
        (("run", "--impl", "droplet", "--functions", "diopi(("), "--functions 'diopi((': not a regular expression"),
        (("run", "--impl", "novendor", "--data", str(data_dir)), "unknown DIOPI implementation 'novendor'; available:"),
        (("run", "--device", "nodev", "--data", str(data_dir)), "--device nodev: unknown or unavailable device"),
        (("count", "--functions", "zzz"), "--functions 'zzz' matches no function"),
    ]
    for argv, message in cases:
        status, out, err = run_cli(*argv)
        assert status == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert message in err, (argv, err)


def test_device_config_skips_with_reasons_and_overrides_tolerances(run_cli, data_dir, tmp_path):
    config = tmp_path / "dev.yaml"
    config.write_text(
        "skip:\n"
        "  - {function: diopiMul, dtype: float16, reason: no half multiply}\n"
        "  - {function: 'diopiSilu.*', shape: scalar, reason: no 0-dim}\n"
        "  - {function: diopiAdd, params: {alpha: 2}, layout: offset, reason: alpha 2 offset}\n"
        "  - {function: diopiCat, shape: [0, 3], reason: empty pieces}\n"
        "tolerance:\n"
        "  - {function: diopiMul, dtype: [float32], atol: 2.0, rtol: 0}\n")
    table = tmp_path / "r.csv"
    status, out, _ = run_cli("run", "--impl", "droplet", "--impl-option", "faults=mul.Tensor:bias", "--data",
                             str(data_dir), "--device-config", str(config), "--csv", str(table))
    rows = _csv(table)
    skipped = {(r["function"], r["detail"]) for r in rows if r["outcome"] == "SKIP"}
    assert skipped == {("diopiMul", "no half multiply"), ("diopiSilu", "no 0-dim"), ("diopiSiluBackward", "no 0-dim"),
                       ("diopiAdd", "alpha 2 offset"), ("diopiCat", "empty pieces")}
    assert all(r["dtype"] == "float16" for r in rows if r["detail"] == "no half multiply")
    assert {r["outcome"] for r in rows if r["function"] == "diopiMul" and r["dtype"] == "float32"} == {"PASS"}
    assert status == 0


@pytest.mark.parametrize(("text", "message"), [
    ("skip:\n  - {function: diopiMul}\n", "skip[0]: reason: missing (required)"),
    ("skip:\n  - {function: diopiMul, reason: x, colour: red}\n", "skip[0]: colour: unknown key"),
    ("skip:\n  - {function: diopiMul, reason: x}\n  - {function: diopiMul, dtype: float17, reason: y}\n",
     "skip[1]: dtype: unknown dtype 'float17'"),
    ("tolerance:\n  - {function: diopiMul, atol: -1, rtol: 0}\n", "tolerance[0]: atol: expected a non-negative number"),
    ("tolerance:\n  - {function: diopiMul, atol: 1}\n", "tolerance[0]: rtol: missing (required)"),
    ("skips: []\n", "unknown key 'skips'"),
    ("skip: [\n", "not valid YAML"),
])
def test_malformed_device_config_names_file_entry_and_key(tmp_path, text, message):
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    with pytest.raises(DeviceConfigError) as info:
        load_device_config(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def test_malformed_device_config_is_one_error_on_the_command_line(run_cli, data_dir, tmp_path):
    path = tmp_path / "dev.yaml"
    path.write_text("skip:\n  - {function: diopiMul}\n")
    status, _, err = run_cli("run", "--impl", "droplet", "--data", str(data_dir), "--device-config", str(path))
    assert status == 2 and f"{path}: skip[0]: reason: missing (required)" in err


def test_ditorch_conformance_forwards_and_rnn_configs_run_on_droplet(tmp_path, capsys):
    from ditorch.cli import main

    data = tmp_path / "data"
    assert main(["conformance", "gen", "--data", str(data), "--functions", "diopiGruCellBackward"]) == 0
    capsys.readouterr()
    assert main(["conformance", "run", "--impl", "droplet", "--data", str(data), "--functions",
                 "diopiGruCellBackward"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("88 cases: PASS 88, FAIL 0")
    assert main(["conformance", "run", "--impl", "droplet", "--impl-option", "faults=diopiGruCellBackward:bias",
                 "--data", str(data), "--functions", "diopiGruCellBackward"]) == 1
    assert "PASS 8  FAIL 80" in capsys.readouterr().out  # the 8 empty-batch cases have no value to bias
