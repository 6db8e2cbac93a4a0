"""Replay of damaged, foreign or hostile case folders: every bad case is reported with the file at fault.

Cases are captured for real on the CPU (``OpCapture``), then damaged on disk. In-process checks use
:func:`op_tools.replay.replay_case`; exit codes of the command line are checked with a few subprocesses
(``python -m op_tools.run_op_from_data`` and ``python -m ditorch replay``) and otherwise with
:func:`op_tools.run_op_from_data.run`, which is what both commands call after parsing.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import op_tools
from diopi import case_format as cf
from op_tools import run_op_from_data
from op_tools.replay import CaseResult, ReplayOptions, find_cases, replay_case

MUL = "torch.Tensor.mul"


# -- helpers -------------------------------------------------------------------------------------------------


@pytest.fixture
def cases_root(tmp_path: Path) -> Path:
    """A real capture of ``(x * y).sum().backward()``: two ``torch.randn`` cases, one mul, one sum."""
    with op_tools.OpCapture(results_dir=tmp_path / "cap", run_id="r", device="cpu") as cap:
        x = torch.randn(4, 5, requires_grad=True)
        y = torch.randn(4, 5)
        z = (x * y).sum()
        z.backward()
    assert cap.run_dir is not None
    return Path(cap.run_dir)


def case_of(root: Path, op: str = MUL) -> Path:
    """The one case directory of ``op`` under ``root``."""
    found = [p for p in find_cases(root) if p.parent.name == op]
    assert len(found) == 1, found
    return found[0]


def edit_record(case_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``case.json`` after ``change`` has modified the record in place."""
    path = case_dir / cf.CASE_FILE
    record = json.loads(path.read_text(encoding="utf-8"))
    change(record)
    path.write_text(json.dumps(record), encoding="utf-8")


def run_cli(args: list[str], tmp_path: Path, module: str = "op_tools.run_op_from_data") -> subprocess.CompletedProcess:
    """The replay command in a subprocess (results under ``tmp_path/res``)."""
    return subprocess.run([sys.executable, "-m", module, *args, "--results_dir", str(tmp_path / "res")],
                          capture_output=True, text=True, timeout=120)


def run_in_process(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """:func:`run_op_from_data.run` on ``path``: the exit status and stderr (whitespace normalized)."""
    parser = argparse.ArgumentParser()
    run_op_from_data.add_arguments(parser)
    code = run_op_from_data.run(parser.parse_args([str(path), "--results_dir", str(tmp_path / "res")]))
    return code, " ".join(capsys.readouterr().err.split())


def result_rows(tmp_path: Path) -> list[dict[str, Any]]:
    """The rows of the one ``results.jsonl`` the replay wrote under ``tmp_path/res``."""
    files = list((tmp_path / "res" / "op_replay").glob("*/results.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text(encoding="utf-8").splitlines()]


def assert_error_naming(result: CaseResult, path: Path, *fragments: str) -> None:
    """``result`` is an ERROR whose message names ``path`` and holds every fragment."""
    assert result.status == "ERROR", result
    assert str(path) in result.message, result.message
    for fragment in fragments:
        assert fragment in result.message, result.message


# -- 1. corrupted case.json ----------------------------------------------------------------------------------


def test_corrupt_case_json_is_error_and_other_cases_pass(cases_root: Path) -> None:
    """Invalid JSON in one case.json: that case is an ERROR naming the file, the others still PASS."""
    bad = case_of(cases_root)
    (bad / cf.CASE_FILE).write_text('{"format": "ditorch-case", "op": ', encoding="utf-8")
    results = {Path(r.path): r for r in (replay_case(p) for p in find_cases(cases_root))}
    assert len(results) == 4
    assert_error_naming(results[bad], bad / cf.CASE_FILE, "not valid JSON")
    assert results[bad].op == "?"
    assert {p.parent.name: r.status for p, r in results.items() if p != bad} == {
        "torch.randn": "PASS", "torch.Tensor.sum": "PASS"}
    assert sorted(r.status for r in results.values()) == ["ERROR", "PASS", "PASS", "PASS"]


def test_cli_corrupt_case_json_exits_1_with_counts(cases_root: Path, tmp_path: Path) -> None:
    """The command goes on past the bad case, exits 1, prints the counts and records the file at fault."""
    bad = case_of(cases_root)
    (bad / cf.CASE_FILE).write_bytes(b"\x00\xffnot json at all")
    proc = run_cli([str(cases_root)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    stderr = " ".join(proc.stderr.split())
    assert "replay: 4 cases: 3 pass, 1 error;" in stderr
    rows = {row["path"]: row for row in result_rows(tmp_path)}
    assert len(rows) == 4
    assert rows[str(bad)]["status"] == "ERROR"
    assert str(bad / cf.CASE_FILE) in rows[str(bad)]["message"]
    assert sorted(row["status"] for row in rows.values()) == ["ERROR", "PASS", "PASS", "PASS"]


# -- 2.-4. damaged or missing tensors.safetensors ------------------------------------------------------------


def test_truncated_tensors_file_is_error(cases_root: Path) -> None:
    """tensors.safetensors cut to half its size: an ERROR naming that file."""
    case = case_of(cases_root)
    data_file = case / cf.TENSORS_FILE
    payload = data_file.read_bytes()
    data_file.write_bytes(payload[: len(payload) // 2])
    assert_error_naming(replay_case(case), data_file, "not a readable safetensors file")


def _bad_offsets_file() -> bytes:
    """A well-formed safetensors header whose tensor claims bytes the file does not hold."""
    header = json.dumps({"i0": {"dtype": "F32", "shape": [4, 5], "data_offsets": [0, 80]},
                         "i1": {"dtype": "F32", "shape": [4, 5], "data_offsets": [80, 160]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\x00" * 16


@pytest.mark.parametrize("payload", [
    pytest.param(b"hello", id="too-short"),
    pytest.param(b"\xff" * 8 + b"garbage" * 20, id="huge-header-length"),
    pytest.param(bytes(range(256)) * 4, id="binary-noise"),
    pytest.param(struct.pack("<Q", 12) + b"{not json!!}", id="header-not-json"),
    pytest.param(_bad_offsets_file(), id="offsets-past-end"),
])
def test_garbage_tensors_file_is_error(cases_root: Path, payload: bytes) -> None:
    """tensors.safetensors replaced by garbage: an ERROR naming that file, never a crash."""
    case = case_of(cases_root)
    data_file = case / cf.TENSORS_FILE
    data_file.write_bytes(payload)
    assert_error_naming(replay_case(case), data_file, "not a readable safetensors file")


def test_missing_tensors_file_is_error(cases_root: Path) -> None:
    """A case.json without its tensors.safetensors: an ERROR naming the missing file."""
    case = case_of(cases_root)
    (case / cf.TENSORS_FILE).unlink()
    assert_error_naming(replay_case(case), case / cf.TENSORS_FILE, "No such file")


def test_tensors_file_without_a_referenced_tensor_is_error(cases_root: Path) -> None:
    """A readable tensors file that lacks a tensor case.json lists: an ERROR naming the file and the key."""
    case = case_of(cases_root)
    data = load_file(str(case / cf.TENSORS_FILE))
    assert {"i0", "i1", "o0", "gi0", "go0"} <= set(data)  # the gradients came with the forward data
    del data["i0"]
    cf.write_tensors(case / cf.TENSORS_FILE, data)
    assert_error_naming(replay_case(case), case / cf.TENSORS_FILE, "'i0'", "are not stored")


# -- 5. folders that hold no case -----------------------------------------------------------------------------


def test_cli_foreign_folder_exits_2(tmp_path: Path) -> None:
    """Files but no case.json anywhere: exit 2 with "no cases", and no results are written."""
    foreign = tmp_path / "foreign"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "notes.txt").write_text("hello", encoding="utf-8")
    (foreign / "sub" / "tensors.safetensors").write_bytes(b"\x00" * 32)
    (foreign / "sub" / "case.json.bak").write_text("{}", encoding="utf-8")
    proc = run_cli([str(foreign)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "no cases" in proc.stderr
    assert not (tmp_path / "res").exists()


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist: exit 2 naming it."""
    missing = tmp_path / "does-not-exist"
    code, stderr = run_in_process(missing, tmp_path, capsys)
    assert code == 2
    assert "no such file or directory" in stderr
    assert missing.name in stderr


def test_ditorch_replay_foreign_folder_exits_2(tmp_path: Path) -> None:
    """``ditorch replay`` is the same command: an empty folder exits 2 with "no cases"."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "ditorch", "replay", str(empty)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OP_TOOLS_RESULTS_DIR": str(tmp_path / "res")})
    assert proc.returncode == 2, proc.stderr
    assert "no cases" in proc.stderr


# -- 6. case.json of another tool, or of a newer format -------------------------------------------------------


@pytest.mark.parametrize("text", [
    pytest.param(json.dumps({"name": "other tool", "version": 1, "op": MUL}), id="no-format"),
    pytest.param(json.dumps({"format": "other-case", "version": 1}), id="other-format"),
    pytest.param(json.dumps([1, 2, 3]), id="json-list"),
    pytest.param("null", id="json-null"),
])
def test_case_json_of_another_tool_is_error(cases_root: Path, text: str) -> None:
    """Valid JSON without ``"format": "ditorch-case"``: an ERROR "not a ditorch case" naming case.json."""
    case = case_of(cases_root)
    (case / cf.CASE_FILE).write_text(text, encoding="utf-8")
    assert_error_naming(replay_case(case), case / cf.CASE_FILE, "not a ditorch case")


@pytest.mark.parametrize("version", [999, "1", None, 1.5])
def test_unsupported_format_version_is_error(cases_root: Path, version: Any) -> None:
    """A newer (or malformed) ``version``: an ERROR naming case.json and the version."""
    case = case_of(cases_root)
    edit_record(case, lambda r: r.update(version=version))
    assert_error_naming(replay_case(case), case / cf.CASE_FILE, f"version {version!r} is not supported")


def test_case_json_missing_required_field_is_error(cases_root: Path) -> None:
    """A ditorch case.json without ``args``: an ERROR naming the file and the field."""
    case = case_of(cases_root)
    edit_record(case, lambda r: r.pop("args"))
    assert_error_naming(replay_case(case), case / cf.CASE_FILE, "missing field 'args'")


# -- 7. unknown op ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["torch.no_such_op", "torch.Tensor.no_such_method"])
def test_unknown_op_is_error(cases_root: Path, op: str) -> None:
    """An op name that resolves to nothing: an ERROR naming the function and the case."""
    case = case_of(cases_root)
    edit_record(case, lambda r: r.update(op=op))
    result = replay_case(case)
    assert_error_naming(result, case, f"cannot find the function {op!r}")
    assert result.op == op


def test_an_op_outside_torch_needs_its_module_allowed(cases_root: Path) -> None:
    """Functions outside torch are called only when their module is allowed (apply_feature cases)."""
    case = case_of(cases_root)
    edit_record(case, lambda r: r.update(op="no_such_module.func"))
    result = replay_case(case)
    assert_error_naming(result, case, "'no_such_module.func' is outside torch", "--allow_module no_such_module")
    allowed = replay_case(case, ReplayOptions(allow_modules=("no_such_module",)))
    assert_error_naming(allowed, case, "cannot find the function 'no_such_module.func'")


# -- 8. opaque arguments ---------------------------------------------------------------------------------------


def test_opaque_argument_is_skip(cases_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An argument that was not serializable: SKIP naming its type; a SKIP alone does not fail the command."""
    case = case_of(cases_root)
    edit_record(case, lambda r: r["args"].append({"opaque": "mypkg.Widget", "repr": "<Widget 7>"}))
    result = replay_case(case)
    assert result.status == "SKIP", result
    assert "mypkg.Widget" in result.message
    assert "not serializable" in result.message
    assert "<Widget 7>" in result.message
    code, stderr = run_in_process(case, tmp_path, capsys)
    assert code == 0
    assert "replay: 1 cases: 1 skip;" in stderr


# -- 9. loading never executes code ---------------------------------------------------------------------------


class _Evil:
    """An object whose unpickling would run a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def _hostile_record(marker: Path) -> dict[str, Any]:
    command = f"touch {marker}"
    pickled = pickle.dumps(_Evil(command), protocol=0).decode("latin-1")
    return {
        "format": cf.FORMAT_NAME, "version": cf.FORMAT_VERSION, "op": "os.system", "id": 1, "device": "cpu",
        "mode": "data", "args": [command, pickled, "__import__('os').system('" + command + "')"],
        "kwargs": {"__reduce__": command}, "outputs": 0, "tensors": {}, "backward": None,
        "py/object": "os.system", "__class__": "subprocess.Popen",
    }


def test_load_case_treats_hostile_values_as_data(tmp_path: Path) -> None:
    """load_case reads pickle payloads, ``__reduce__`` keys and code strings as plain strings, runs nothing.

    Both files are hostile: case.json holds the strings, tensors.safetensors holds real pickle bytes that
    would run ``touch`` if unpickled; load_case must reject the tensors file without unpickling it.
    """
    marker = tmp_path / "pwned"
    case = tmp_path / "case"
    case.mkdir()
    record = _hostile_record(marker)
    (case / cf.CASE_FILE).write_text(json.dumps(record), encoding="utf-8")
    cf.write_tensors(case / cf.TENSORS_FILE, {})
    loaded = cf.load_case(case)
    assert loaded.record == record
    assert loaded.op == "os.system"
    assert all(isinstance(a, str) for a in loaded.record["args"])
    assert loaded.data == {}
    assert not marker.exists()

    (case / cf.TENSORS_FILE).write_bytes(pickle.dumps(_Evil(f"touch {marker}")))
    with pytest.raises(cf.CaseFormatError, match="not a readable safetensors file") as info:
        cf.load_case(case)
    assert str(case / cf.TENSORS_FILE) in str(info.value)
    assert not marker.exists()

    torch.save({"x": _Evil(f"touch {marker}")}, case / cf.TENSORS_FILE)  # a torch.save zip is no safetensors
    with pytest.raises(cf.CaseFormatError, match="not a readable safetensors file"):
        cf.load_case(case)
    assert not marker.exists()


def test_hostile_value_shapes_are_rejected_by_decoding(cases_root: Path, tmp_path: Path) -> None:
    """A ``{"__reduce__": ...}`` argument is not a value the format knows: ERROR, nothing is run."""
    marker = tmp_path / "pwned"
    case = case_of(cases_root)
    edit_record(case, lambda r: r["args"].append({"__reduce__": ["os.system", [f"touch {marker}"]]}))
    result = replay_case(case)
    assert_error_naming(result, case, "unexpected value", "__reduce__")
    assert not marker.exists()


def test_replay_does_not_call_arbitrary_functions(tmp_path: Path) -> None:
    """A careful reviewer expects replay to run only torch operators (or functions registered with
    apply_feature), never a callable of an arbitrary module named by an untrusted case.json.

    ``resolve_function`` documents that it resolves dotted names inside importable modules; that is how
    functions wrapped by ``apply_feature`` are replayed, but it means ``os.system`` resolves too.
    """
    marker = tmp_path / "pwned"
    case = tmp_path / "case"
    case.mkdir()
    record = _hostile_record(marker)
    record["args"] = [f"touch {marker}"]
    record["kwargs"] = {}
    (case / cf.CASE_FILE).write_text(json.dumps(record), encoding="utf-8")
    cf.write_tensors(case / cf.TENSORS_FILE, {})
    result = replay_case(case)
    assert not marker.exists(), f"replay ran os.system (status {result.status})"
    assert result.status in ("ERROR", "SKIP")
    assert "os.system" in result.message


# -- 10. layout records that do not match the stored data ------------------------------------------------------


def _grow(section: str, key: str) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        tensors = record["tensors"] if section == "tensors" else record["backward"]["tensors"]
        tensors[key]["shape"] = [8, 5]  # 40 elements; the stored span holds 20

    return change


@pytest.mark.parametrize(("section", "key"), [
    pytest.param("tensors", "i0", id="input"),
    pytest.param("backward", "go0", id="grad-output"),
    pytest.param("tensors", "o0", id="output"),
    pytest.param("backward", "gi0", id="grad-input"),
])
def test_shape_bigger_than_stored_data_is_error(cases_root: Path, section: str, key: str) -> None:
    """A tensor record whose shape needs more elements than stored: an ERROR saying so, naming the case."""
    case = case_of(cases_root)
    edit_record(case, _grow(section, key))
    result = replay_case(case)
    assert_error_naming(result, case, "stored data has shape [20]; the layout needs 40 elements")


def test_cli_bad_output_record_does_not_abort_run(cases_root: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One case with a bad output record: the command still replays the others and exits 1."""
    case = case_of(cases_root)
    edit_record(case, _grow("tensors", "o0"))
    code, stderr = run_in_process(cases_root, tmp_path, capsys)
    assert code == 1
    assert "replay: 4 cases: 3 pass, 1 error;" in stderr


# -- 11. statistics-mode captures ------------------------------------------------------------------------------


def _stats_capture(tmp_path: Path) -> Path:
    with op_tools.OpCapture(results_dir=tmp_path / "cap", run_id="s", device="cpu", mode="stats") as cap:
        x = torch.randn(4, 5, requires_grad=True)
        (x * 2).sum().backward()
    assert cap.run_dir is not None
    return Path(cap.run_dir)


def test_stats_capture_has_no_replayable_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Statistics mode writes ``stats.jsonl`` (one row per call and phase), no case folders: the replay
    command finds no case.json and exits 2 with "no cases"."""
    run_dir = _stats_capture(tmp_path)
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["op"], r["phase"]) for r in rows if r["phase"] == "forward"] == [
        ("torch.randn", "forward"), ("torch.Tensor.mul", "forward"), ("torch.Tensor.sum", "forward")]
    assert list(run_dir.rglob(cf.CASE_FILE)) == []
    assert list(run_dir.rglob(cf.TENSORS_FILE)) == []
    assert find_cases(run_dir) == []
    code, stderr = run_in_process(run_dir, tmp_path, capsys)
    assert code == 2
    assert "no cases" in stderr


def test_stats_mode_case_json_is_skip(cases_root: Path) -> None:
    """A case.json marked ``"mode": "stats"`` (no tensor data) is a SKIP, not an ERROR about missing data."""
    case = case_of(cases_root)
    edit_record(case, lambda r: r.update(mode="stats"))
    (case / cf.TENSORS_FILE).unlink()
    result = replay_case(case)
    assert result.status == "SKIP", result
    assert "statistics-only" in result.message


def test_stats_capture_writes_csv_with_backward(tmp_path: Path) -> None:
    """Statistics mode also writes ``stats.csv`` (one row per tensor), backward rows included."""
    run_dir = _stats_capture(tmp_path)
    assert (run_dir / "stats.csv").is_file()
