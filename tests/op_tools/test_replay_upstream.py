"""Replay of upstream op_tools captures (``op_capture_result/<op>/<pid>/<id>/.../{input,output,grad_*}.pth``).

The captures are written the way upstream's ``OpCapture`` wrote them (its README: ``with op_tools.OpCapture():
code_snippet_to_capture()`` prints ``op_capture_result/.../torch.Tensor.add/10/input.pth saved``), by
:func:`upstream_capture_call` below: per call, ``torch.save`` of ``{"name", "args", "kwargs", "identifier"}``
for the inputs before the call and for ``(result,)`` after it, and, from a hook on the result's ``grad_fn``,
the gradients the node received (``grad_outputs.pth``) and produced (``grad_inputs.pth``). Then
``python -m op_tools.run_op_from_data op_capture_result`` (what ``ditorch replay`` runs) must judge them.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from diopi import case_format as cf
from op_tools import run_op_from_data, upstream_capture
from op_tools.replay import find_cases, replay_case

PID = 2334011


def _save(root: Path, name: str, identifier: str, *args: Any, **kwargs: Any) -> Path:
    """Upstream's ``save_op_args``: ``op_capture_result/<name>/<pid>/<identifier>.pth``."""
    path = root / "op_capture_result" / name / str(PID) / f"{identifier}.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"name": name, "args": args, "kwargs": kwargs, "identifier": identifier}, path)
    return path


def upstream_capture_call(root: Path, name: str, func: Any, call_id: int, *args: Any, **kwargs: Any) -> Any:
    """One call captured as upstream's OpCaptureHook did; returns the result (run ``backward`` on it for the
    gradient files). The folder is ``op_capture_result/<name>/<pid>/<id>/<time>/``."""
    op_id = f"{call_id}/2024-08-06-11-41-00"
    _save(root, name, f"{op_id}/input", *args, **kwargs)
    result = func(*args, **kwargs)
    _save(root, name, f"{op_id}/output", result)
    if isinstance(result, torch.Tensor) and result.grad_fn is not None:
        def grad_fun(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            _save(root, name, f"{op_id}/grad_inputs", *tuple(grad_inputs))
            _save(root, name, f"{op_id}/grad_outputs", *tuple(grad_outputs))

        result.grad_fn.register_hook(grad_fun)
    return result


def case_dir(root: Path, name: str, call_id: int) -> Path:
    return root / "op_capture_result" / name / str(PID) / str(call_id) / "2024-08-06-11-41-00"


def run_cli(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    """``run_op_from_data.run`` (what both commands call after parsing): exit status and results.jsonl rows."""
    parser = argparse.ArgumentParser()
    run_op_from_data.add_arguments(parser)
    code = run_op_from_data.run(parser.parse_args([str(path), "--results_dir", str(tmp_path / "res")]))
    capsys.readouterr()
    files = list((tmp_path / "res" / "op_replay").glob("*/results.jsonl"))
    assert len(files) == 1, files
    return code, [json.loads(line) for line in files[0].read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    """A capture tree: torch.add with alpha (forward only), F.linear with weight and bias (forward and
    backward), and torch.Tensor.mul whose recorded output is wrong by 0.5 in one element."""
    torch.manual_seed(0)
    root = tmp_path / "cap"
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    upstream_capture_call(root, "torch.add", torch.add, 1, a, b, alpha=2)

    x = torch.randn(6, 5, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    bias = torch.randn(3, requires_grad=True)
    y = upstream_capture_call(root, "torch.nn.functional.linear", F.linear, 2, x, w, bias)
    y.backward(torch.full_like(y, 0.5))

    p, q = torch.randn(4), torch.randn(4)
    upstream_capture_call(root, "torch.Tensor.mul", torch.Tensor.mul, 3, p, q)
    out = case_dir(root, "torch.Tensor.mul", 3) / "output.pth"
    record = torch.load(out, weights_only=True)
    record["args"][0][2] += 0.5
    torch.save(record, out)
    return root


def test_files_are_upstreams_layout(captured: Path) -> None:
    """The fixture writes what upstream wrote: the folders and dict records the tool reads."""
    linear = case_dir(captured, "torch.nn.functional.linear", 2)
    assert sorted(p.name for p in linear.iterdir()) == sorted(upstream_capture.CAPTURE_FILES)
    record = torch.load(linear / "input.pth", weights_only=True)
    assert record["name"] == "torch.nn.functional.linear" and len(record["args"]) == 3 and record["kwargs"] == {}
    assert len(torch.load(linear / "grad_inputs.pth", weights_only=True)["args"]) == 3  # bias, x, w.t()


def test_find_cases_from_root_and_subfolders(captured: Path) -> None:
    tree = captured / "op_capture_result"
    expected = sorted(case_dir(captured, op, i) for op, i in
                      (("torch.add", 1), ("torch.nn.functional.linear", 2), ("torch.Tensor.mul", 3)))
    assert sorted(find_cases(tree)) == expected
    assert find_cases(tree / "torch.add") == [case_dir(captured, "torch.add", 1)]
    one = case_dir(captured, "torch.Tensor.mul", 3)
    assert find_cases(one) == [one]
    assert find_cases(one / "input.pth") == [one]


def test_binary_op_with_alpha_passes_bitwise(captured: Path) -> None:
    imported = upstream_capture.load_capture(case_dir(captured, "torch.add", 1))
    record = imported.case.record
    assert record["op"] == "torch.add" and record["kwargs"] == {"alpha": 2}
    assert record["format"] == cf.FORMAT_NAME and record["backward"] is None and imported.note == ""
    r = replay_case(case_dir(captured, "torch.add", 1))
    assert (r.op, r.status, r.forward, r.backward) == ("torch.add", "PASS", "PASS", "-")
    assert r.bitwise_forward is True and r.max_abs_error == 0.0 and r.message == ""


def test_linear_forward_and_backward_judged(captured: Path) -> None:
    """F.linear: the output and the gradients of input, weight (recorded as the gradient of ``w.t()``) and
    bias are judged, bitwise equal."""
    path = case_dir(captured, "torch.nn.functional.linear", 2)
    section = upstream_capture.load_capture(path).case.record["backward"]
    assert sorted(section["grad_inputs"]) == ["i0", "i1", "i2"] and list(section["grad_outputs"]) == ["o0"]
    r = replay_case(path)
    assert (r.status, r.forward, r.backward) == ("PASS", "PASS", "PASS"), r
    assert r.bitwise_forward is True and r.bitwise_backward is True and r.message == ""
    assert len(r.backward_ms) == 1


def test_wrong_recorded_output_fails(captured: Path) -> None:
    r = replay_case(case_dir(captured, "torch.Tensor.mul", 3))
    assert (r.op, r.status, r.forward) == ("torch.Tensor.mul", "FAIL", "FAIL")
    assert r.bitwise_forward is False
    assert r.max_abs_error == pytest.approx(0.5)


def test_wrong_recorded_gradient_fails(captured: Path) -> None:
    path = case_dir(captured, "torch.nn.functional.linear", 2)
    grads = torch.load(path / "grad_inputs.pth", weights_only=True)
    grads["args"] = (grads["args"][0] * 3, *grads["args"][1:])  # the bias gradient
    torch.save(grads, path / "grad_inputs.pth")
    r = replay_case(path)
    assert (r.status, r.forward, r.backward) == ("FAIL", "PASS", "FAIL")
    assert r.bitwise_backward is False and r.max_abs_error > 0
    assert r.message.startswith("gradient")


def test_missing_gradient_file_replays_forward_only(captured: Path) -> None:
    path = case_dir(captured, "torch.nn.functional.linear", 2)
    (path / "grad_inputs.pth").unlink()
    r = replay_case(path)
    assert (r.status, r.forward, r.backward) == ("PASS", "PASS", "-")
    assert "forward only" in r.message and "grad_inputs.pth is missing" in r.message


def test_readme_layout_takes_the_op_from_the_path(tmp_path: Path) -> None:
    """The README's ``op_capture_result/0/2024-08-06--11-41/torch.Tensor.sum/14/`` with ``{"args", "kwargs"}``
    records that carry no name: the op comes from the path."""
    d = tmp_path / "op_capture_result" / "0" / "2024-08-06--11-41" / "torch.Tensor.sum" / "14"
    d.mkdir(parents=True)
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save({"args": (t,), "kwargs": {"dim": 1}}, d / "input.pth")
    torch.save({"args": (t.sum(dim=1),), "kwargs": {}}, d / "output.pth")
    assert upstream_capture.op_name_from_path(d) == "torch.Tensor.sum"
    r = replay_case(find_cases(tmp_path / "op_capture_result")[0])
    assert (r.op, r.status, r.bitwise_forward) == ("torch.Tensor.sum", "PASS", True)
    assert upstream_capture.load_capture(d).case.record["id"] == 14


class _Marker:
    """Unpickling this would create ``path`` (``open(path, "w")``)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def test_pickled_object_is_refused_and_runs_nothing(captured: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "code_ran"
    path = case_dir(captured, "torch.add", 1)
    record = torch.load(path / "input.pth", weights_only=True)
    record["kwargs"]["alpha"] = _Marker(marker)
    torch.save(record, path / "input.pth")
    assert not marker.exists()

    with pytest.raises(upstream_capture.RefusedFileError) as info:
        upstream_capture.load_pth(path / "input.pth")
    assert str(info.value).startswith(f"{path / 'input.pth'}: refused: not plain data")
    r = replay_case(path)
    assert (r.status, r.forward) == ("ERROR", "-")
    assert str(path / "input.pth") in r.message and "refused: not plain data" in r.message
    assert "open" in r.message

    code, rows = run_cli(captured / "op_capture_result", tmp_path, capsys)
    assert code == 1
    assert {(row["op"], row["status"]) for row in rows} == {
        ("torch.add", "ERROR"), ("torch.nn.functional.linear", "PASS"), ("torch.Tensor.mul", "FAIL")}
    assert not marker.exists()  # nothing ran: the file was never unpickled with code


def test_command_judges_upstream_and_our_cases_together(captured: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """One folder holding our capture and upstream's: every case is replayed and judged."""
    import op_tools

    u, v = torch.ones(3), torch.full((3,), 2.0)
    with op_tools.OpCapture(results_dir=captured / "ours", run_id="r", device="cpu"):
        torch.mul(u, v)
    code, rows = run_cli(captured, tmp_path, capsys)
    assert code == 1  # the wrong mul output
    statuses = sorted((row["op"], row["status"], row["bitwise_forward"]) for row in rows)
    assert statuses == [("torch.Tensor.mul", "FAIL", False), ("torch.add", "PASS", True),
                        ("torch.mul", "PASS", True), ("torch.nn.functional.linear", "PASS", True)]
    # Replay imports in memory: nothing is written into upstream's capture folders.
    assert not list((captured / "op_capture_result").rglob(cf.CASE_FILE))
    assert all(sorted(os.listdir(p)) == sorted(upstream_capture.CAPTURE_FILES[:2])
               for p in (case_dir(captured, "torch.add", 1), case_dir(captured, "torch.Tensor.mul", 3)))
