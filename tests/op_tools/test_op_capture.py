"""OpCapture: the case format, layouts, in-place ops, statistics, budget, steps and write failures."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import op_tools
import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi import case_format as cf
from diopi.env import ConfigError
from op_tools.replay import ReplayOptions, replay_case, replay_dir


def case_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("case.json"))


def records(root: Path) -> dict[str, dict]:
    return {str(d.relative_to(root)): json.loads((d / "case.json").read_text()) for d in case_dirs(root)}


def test_a_case_is_json_and_safetensors_with_every_field(tmp_path: Path) -> None:
    x = torch.randn(3, 4, requires_grad=True)
    with op_tools.OpCapture(results_dir=tmp_path, run_id="r", device="cpu") as cap:
        y = (x * 2).sum()  # the captured line
        y.backward()
    assert cap.run_dir == tmp_path / "op_capture" / "r" / "rank0"
    assert cap.captured == 2 and cap.cases_written == 2 and cap.backward_cases == 2
    (mul,) = [r for r in records(cap.run_dir).values() if r["op"] == "torch.Tensor.mul"]
    assert mul["format"] == "ditorch-case" and mul["version"] == 1 and mul["op"] == "torch.Tensor.mul"
    assert mul["args"] == [{"tensor": "i0"}, 2] and mul["kwargs"] == {} and mul["outputs"] == {"tensor": "o0"}
    assert mul["tensors"]["i0"] == {"dtype": "float32", "shape": [3, 4], "stride": [4, 1], "storage_offset": 0,
                                    "device": "cpu", "requires_grad": True}
    assert "# the captured line" in mul["call_site"] and mul["call_site"].startswith(__file__)
    assert mul["step"] >= 1 and mul["rank"] == 0 and mul["versions"]["torch"] == torch.__version__
    assert mul["backward"]["grad_inputs"] == {"i0": "gi0"} and mul["backward"]["grad_outputs"] == {"o0": "go0"}
    case_dir = cap.run_dir / "torch.Tensor.mul" / str(mul["id"])
    with safe_open(case_dir / "tensors.safetensors", framework="pt") as f:
        assert set(f.keys()) == {"i0", "o0", "gi0", "go0"}
        torch.testing.assert_close(f.get_tensor("i0").view(3, 4), x.detach(), rtol=0, atol=0)
        torch.testing.assert_close(f.get_tensor("gi0"), torch.full((12,), 2.0), rtol=0, atol=0)
    assert not list(tmp_path.rglob("*.pth")) and not list(tmp_path.rglob("*.pkl"))
    index = [json.loads(line) for line in (cap.run_dir / "cases.jsonl").read_text().splitlines()]
    assert len(index) == cap.captured and (cap.run_dir / "cases.csv").read_text().count("\n") == cap.captured + 1


def test_non_contiguous_inputs_keep_their_strides_and_offset(tmp_path: Path) -> None:
    base = torch.arange(48.0).reshape(6, 8)
    view = base[1:, ::2].t()  # strides (2, 8), storage offset 8
    with op_tools.OpCapture(results_dir=tmp_path, run_id="r", device="cpu", ops="torch.Tensor.exp") as cap:
        view.exp()
    (case_dir,) = case_dirs(cap.run_dir)
    loaded = cf.load_case(case_dir)
    meta = loaded.record["tensors"]["i0"]
    assert (meta["shape"], meta["stride"], meta["storage_offset"]) == ([4, 5], [2, 8], 8)
    rebuilt = cf.rebuild_tensor(meta, loaded.data["i0"], "dipu")
    assert rebuilt.stride() == (2, 8) and rebuilt.storage_offset() == 8 and not rebuilt.is_contiguous()
    assert torch.equal(rebuilt.cpu(), view)
    result = replay_case(case_dir, ReplayOptions(device="cpu"))
    assert result.status == "PASS" and result.bitwise_forward


def test_inplace_ops_keep_their_inputs_from_before_the_call(tmp_path: Path) -> None:
    x = torch.ones(4, requires_grad=True)
    with op_tools.OpCapture(results_dir=tmp_path, run_id="r", device="cpu", ops="torch.Tensor.mul_") as cap:
        y = x * 1.0
        y.mul_(3)
    y.sum().backward()
    (case_dir,) = case_dirs(cap.run_dir)
    loaded = cf.load_case(case_dir)
    assert loaded.record["inplace"]
    assert torch.equal(loaded.data["i0"], torch.ones(4)) and torch.equal(loaded.data["o0"], torch.full((4,), 3.0))
    assert (case_dir / "backward.safetensors").is_file()  # the backward ran after stop(): written next to it
    for _ in range(2):  # fresh inputs for every run
        result = replay_case(case_dir, ReplayOptions(run_times=3))
        assert result.status == "PASS" and result.bitwise_forward and result.bitwise_backward


def test_stats_mode_writes_statistics_and_no_data(tmp_path: Path) -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, float("nan")]], device="dipu", requires_grad=True)
    w = torch.arange(4.0, device="dipu").reshape(2, 2).requires_grad_()
    with op_tools.OpCapture(results_dir=tmp_path, run_id="s", mode="stats") as cap:
        y = w * 2.0
        z = (y * x).sum()
    z.backward()
    assert not list(tmp_path.rglob("*.safetensors"))
    rows = [json.loads(line) for line in (cap.run_dir / "stats.jsonl").read_text().splitlines()]
    forward = {r["op"]: r for r in rows if r["phase"] == "forward"}
    first_mul = next(r for r in rows if r["op"] == "torch.Tensor.mul" and r["phase"] == "forward")
    w_stats = first_mul["tensors"]["i0"]
    assert w_stats["min"] == 0.0 and w_stats["max"] == 3.0 and w_stats["mean"] == pytest.approx(1.5)
    assert w_stats["std"] == pytest.approx(float(torch.arange(4.0).std()))
    assert w_stats["norm"] == pytest.approx(float(torch.arange(4.0).norm())) and w_stats["nan"] == 0
    second_mul = [r for r in rows if r["op"] == "torch.Tensor.mul" and r["phase"] == "forward"][1]
    x_stats = second_mul["tensors"]["i1"]
    assert x_stats["nan"] == 1 and x_stats["min"] == 1.0 and x_stats["max"] == 3.0 and x_stats["mean"] == 2.0
    assert "torch.Tensor.sum" in forward
    backward = [r for r in rows if r["phase"] == "backward"]
    assert len(backward) == cap.backward_cases == 3
    sum_bw = next(r for r in backward if r["op"] == "torch.Tensor.sum")
    assert sum_bw["tensors"]["gi0"]["min"] == sum_bw["tensors"]["gi0"]["max"] == 1.0
    csv_lines = (cap.run_dir / "stats.csv").read_text().splitlines()
    assert csv_lines[0].startswith("id,op,step,phase,tensor,shape,dtype") and len(csv_lines) > len(rows)
    assert replay_dir(cap.run_dir) is not None and not case_dirs(cap.run_dir)


def _stats_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]


def test_stats_mode_inputs_are_the_values_before_the_call(tmp_path: Path) -> None:
    """In-place ops (by name, ``out=``, ``inplace=True``, batch norm's running statistics) are reduced
    before the call. Other calls reduce their inputs with their outputs; one that writes an input without
    saying so (a fused kernel under ``apply_feature``) is caught by the version counter, its row says so,
    and later calls of that function reduce their inputs first."""
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0])
    batch = torch.arange(8.0).reshape(4, 2)
    running_mean, running_var = torch.zeros(2), torch.ones(2)

    def fused_update(t: torch.Tensor) -> torch.Tensor:
        t.add_(100.0)
        return t * 2

    with op_tools.OpCapture(results_dir=tmp_path, run_id="v", device="cpu", mode="stats") as cap:
        x.mul_(2.0)  # in-place by name
        torch.nn.functional.relu(x, inplace=True)
        torch.add(x, 1.0, out=torch.empty(4))
        torch.nn.functional.batch_norm(batch, running_mean, running_var, training=True, momentum=0.5)
    handle = op_tools.apply_feature(fused_update, cap)
    for _ in range(2):
        handle.wrapped[0](torch.zeros(3))
    handle.remove()
    cap.close()
    rows = [r for r in _stats_rows(cap.run_dir) if r["phase"] == "forward"]
    mul_, relu = rows[0], next(r for r in rows if r["op"] == "torch.nn.functional.relu")
    assert mul_["tensors"]["i0"]["min"] == -3.0 and mul_["tensors"]["o0"]["min"] == -6.0
    assert relu["tensors"]["i0"]["min"] == -6.0 and relu["tensors"]["o0"]["min"] == 0.0
    add = next(r for r in rows if r["op"] == "torch.add")
    assert add["tensors"]["i0"]["max"] == 8.0 and add["tensors"]["o0"]["max"] == 9.0
    norm = next(r for r in rows if r["op"] == "torch.nn.functional.batch_norm")
    assert norm["tensors"]["i1"]["max"] == 0.0 and running_mean.tolist() == [1.5, 2.0]  # before the update
    first, second = [r for r in rows if r["op"].endswith("fused_update")]
    assert first["inputs_after_call"] is True and first["tensors"]["i0"]["max"] == 100.0  # after the call
    assert "inputs_after_call" not in second and second["tensors"]["i0"]["max"] == 0.0  # before, from now on
    assert second["tensors"]["o0"]["max"] == 200.0
    assert all("inputs_after_call" not in r for r in rows if not r["op"].endswith("fused_update"))


def test_stats_csv_rows_match_the_jsonl(tmp_path: Path) -> None:
    """stats.csv has one row per tensor of every JSONL row, with the same numbers; an all-NaN tensor has
    empty cells where JSON has null."""
    import csv

    x = torch.randn(6, 5, requires_grad=True)
    with op_tools.OpCapture(results_dir=tmp_path, run_id="c", device="cpu", mode="stats") as cap:
        (torch.tanh(x) * 3).sum().backward()
        torch.full((3,), float("nan")) + 1
    rows = _stats_rows(cap.run_dir)
    table = list(csv.DictReader((cap.run_dir / "stats.csv").open()))
    expected = [(r["id"], r["phase"], key, t) for r in rows for key, t in r["tensors"].items()]
    assert len(table) == len(expected) and any(r["phase"] == "backward" for r in rows)
    for cells, (call_id, phase, key, t) in zip(table, expected, strict=True):
        assert (int(cells["id"]), cells["phase"], cells["tensor"]) == (call_id, phase, key)
        assert json.loads(cells["shape"]) == t["shape"] and cells["dtype"] == t["dtype"]
        for field in ("min", "max", "mean", "std", "norm"):
            assert (float(cells[field]) if cells[field] else None) == t[field]
        assert int(cells["nan"]) == t["nan"] and int(cells["numel"]) == t["numel"]
    assert any(c["nan"] == "3" and c["min"] == "" for c in table)


def test_stats_survive_sums_that_overflow_the_tensor_precision() -> None:
    from op_tools.tensor_stats import tensor_stats

    big = torch.tensor([3e38, 2e38, 3e38, 1e38])
    stats = tensor_stats(big)
    assert stats["mean"] == pytest.approx(2.25e38) and stats["norm"] == pytest.approx(float(big.double().norm()))
    assert stats["nan"] == stats["inf"] == 0 and stats["max"] == pytest.approx(3e38)


def test_byte_budget_stops_capturing_and_training_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    x = torch.ones(1000)  # 4000 bytes a tensor
    with op_tools.OpCapture(results_dir=tmp_path, run_id="b", device="cpu", max_bytes="20000") as cap:
        results = [x + i for i in range(10)]
    assert all(torch.equal(r, x + i) for i, r in enumerate(results))
    assert cap.captured == 2 and cap.halted and "byte budget" in cap.halted
    assert len(case_dirs(cap.run_dir)) == cap.captured
    err = capsys.readouterr().err
    assert err.count("byte budget OP_CAPTURE_MAX_BYTES=20000 reached") == 1
    assert len(err.strip().splitlines()) == 3  # start, budget, summary


def test_env_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_CAPTURE_LIST", "torch.Tensor.(mul|add)")
    monkeypatch.setenv("OP_CAPTURE_DISABLE_LIST", "torch.Tensor.add")
    monkeypatch.setenv("OP_TOOLS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("OP_TOOLS_RUN_ID", "env")
    monkeypatch.setenv("OP_TOOLS_DEVICE", "cpu")
    x = torch.ones(3)
    with op_tools.OpCapture() as cap:
        x + 1
        x * 2
        x - 1
    assert cap.run_dir == tmp_path / "op_capture" / "env" / "rank0"
    assert [r["op"] for r in records(cap.run_dir).values()] == ["torch.Tensor.mul"]
    monkeypatch.setenv("OP_CAPTURE_MODE", "everything")
    with pytest.raises(ValueError, match="OP_CAPTURE_MODE"):
        op_tools.OpCapture()
    monkeypatch.setenv("OP_CAPTURE_MODE", "data")
    monkeypatch.setenv("OP_CAPTURE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="OP_CAPTURE_MAX_BYTES"):
        op_tools.OpCapture()


def test_step_range_counts_optimizer_steps(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4)
    first = op_tools.current_step()  # steps are counted for the whole process
    with op_tools.OpCapture(results_dir=tmp_path, run_id="st", device="cpu", steps=f"{first + 1}-{first + 2}",
                            ops="torch.nn.functional.linear") as cap:
        for _ in range(4):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    steps = sorted(r["step"] for r in records(cap.run_dir).values())
    assert steps == [first + 1, first + 2] and cap.captured == 2


def test_an_unwritable_folder_stops_capturing_with_one_message(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the results folder should be")
    with pytest.raises(ConfigError, match=r"results_dir=.*not_a_folder' is a file; expected a folder"):
        op_tools.OpCapture(results_dir=blocker, device="cpu").start()  # seen at start: nothing runs
    x = torch.ones(3)
    with op_tools.OpCapture(results_dir=blocker / "results", device="cpu") as cap:  # found only when writing
        y = x + 1
    assert torch.equal(y, x + 1) and cap.captured == 0 and "cannot write" in cap.halted
    err = capsys.readouterr().err
    assert err.count("cannot write to") == 1 and str(blocker) in err


def test_a_full_disk_stops_capturing_with_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    def disk_full(path: Path, data: dict) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(cf, "write_tensors", disk_full)
    x = torch.ones(3)
    with op_tools.OpCapture(results_dir=tmp_path, device="cpu") as cap:
        results = [x * i for i in range(50)]
    assert all(torch.equal(r, x * i) for i, r in enumerate(results))
    assert cap.cases_written == 0 and cap.halted and "No space left on device" in cap.halted
    err = capsys.readouterr().err
    assert err.count("No space left on device") <= 2  # the writer's warning, and the summary's reason
    assert err.count("writing results failed") == 1


def test_a_full_queue_makes_the_step_wait_and_nothing_is_dropped(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    write_tensors = cf.write_tensors
    running: dict[str, op_tools.OpCapture] = {}

    def held_disk(*args: object, **kwargs: object) -> int:
        """The writers hold their jobs until the step has had to wait for room in the queue: the queue fills
        however fast or slow the machine is (the deadline only bounds a hang)."""
        writer, deadline = running["cap"]._writer, time.monotonic() + 60
        while writer is not None and writer.waits == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        return write_tensors(*args, **kwargs)

    monkeypatch.setattr(cf, "write_tensors", held_disk)
    x = torch.randn(256, 256)
    with op_tools.OpCapture(results_dir=tmp_path, device="cpu", queue_bytes=1) as cap:
        running["cap"] = cap
        for i in range(40):
            x = x * 1.0001 + i
    assert cap.captured == 80 and cap.cases_written == 80 and len(case_dirs(cap.run_dir)) == 80
    assert cap.queue_waits > 0


def test_capture_on_dipu_replays_on_cpu_and_finds_a_faulty_kernel(tmp_path: Path) -> None:
    from torch_dipu.vendors.droplet import switches

    x = torch.randn(8, 16, device="dipu", requires_grad=True)
    w = torch.randn(4, 16, device="dipu", requires_grad=True)
    with op_tools.OpCapture(results_dir=tmp_path, run_id="d", ops="torch.nn.functional.linear") as cap:
        y = torch.nn.functional.linear(x, w)
    y.sum().backward()
    (case_dir,) = case_dirs(cap.run_dir)
    assert cf.load_case(case_dir).record["device"] == "dipu:0"
    same = replay_case(case_dir)
    assert same.device == "dipu:0" and same.status == "PASS" and same.bitwise_forward and same.bitwise_backward
    on_cpu = replay_case(case_dir, ReplayOptions(device="cpu"))
    assert on_cpu.device == "cpu" and on_cpu.status == "PASS"
    with switches(faults="linear:bias:0.5"):
        faulty = replay_case(case_dir)
    assert faulty.status == "FAIL" and faulty.forward == "FAIL" and not faulty.bitwise_forward
    assert "outside" in faulty.message


def test_the_statistics_operator_agrees_on_every_path() -> None:
    """diopi::tensor_stats: the CPU kernel, the generic composite of other devices (run here on CPU tensors)
    and the dipu path (the vendor function) give the same statistics as torch computes them."""
    from diopi.custom_ops import tensor_stats as composite
    from op_tools.tensor_stats import _as_float, device_stats, stats_of_columns, tensor_stats

    torch.manual_seed(0)  # float32 sums of squares: std within 1e-6 for most draws, not all
    tensors = [torch.randn(30, 40) + 3, torch.randn(64, dtype=torch.bfloat16), torch.arange(6),
               torch.tensor([1.0, float("nan"), 2.0, float("inf")]), torch.full((5,), 0.25), torch.empty(0)]
    flat = composite([_as_float(t, torch.float64) for t in tensors], torch.float64).tolist()
    generic = stats_of_columns(flat, [t.numel() for t in tensors])
    on_dipu = device_stats([t.to("dipu") for t in tensors])
    for t, generic_stats, dipu in zip(tensors, generic, on_dipu, strict=True):
        host = tensor_stats(t)
        assert dipu == host
        if t.numel() == 0:
            assert generic_stats == host
        else:
            assert generic_stats == pytest.approx(host, rel=1e-5, abs=1e-6)
    first = tensor_stats(tensors[0])
    assert first["min"] == float(tensors[0].min()) and first["max"] == float(tensors[0].max())
    assert first["mean"] == pytest.approx(float(tensors[0].double().mean()))
    assert first["std"] == pytest.approx(float(tensors[0].double().std()), rel=1e-6)
    assert first["norm"] == pytest.approx(float(tensors[0].double().norm()), rel=1e-6)
    assert tensor_stats(tensors[3])["nan"] == 1 and tensor_stats(tensors[3])["inf"] == 1
    assert tensor_stats(tensors[4])["std"] == 0.0 and tensor_stats(tensors[5])["mean"] is None


def test_replay_options_acc_check_forward_only_and_timings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from op_tools import run_op_from_data
    from torch_dipu.vendors.droplet import switches

    x = torch.randn(8, 16, device="dipu", requires_grad=True)
    w = torch.randn(4, 16, device="dipu", requires_grad=True)
    with op_tools.OpCapture(results_dir=tmp_path, run_id="o", ops="torch.nn.functional.linear") as cap:
        torch.nn.functional.linear(x, w).sum().backward()
    (case_dir,) = case_dirs(cap.run_dir)
    checked = replay_case(case_dir, ReplayOptions(acc_check=True))
    assert checked.status == "PASS" and checked.forward in ("PASS", "PASS (noise)")
    with switches(faults="mm:bias:0.5"):  # the captured outputs were right; the CPU reference is too
        assert replay_case(case_dir, ReplayOptions(acc_check=True)).status == "FAIL"
    forward_only = replay_case(case_dir, ReplayOptions(only_run_forward=True, run_times=3))
    assert forward_only.backward == "-" and len(forward_only.forward_ms) == 3 and forward_only.backward_ms == []
    parser = run_op_from_data.argparse.ArgumentParser()
    run_op_from_data.add_arguments(parser)
    args = parser.parse_args([str(cap.run_dir), "--run_times", "2", "--sync_time_measure",
                              "--results_dir", str(tmp_path / "res")])
    assert run_op_from_data.run(args) == 0
    err = capsys.readouterr().err
    assert err.count("SyncExecuteTimer: torch.nn.functional.linear forward elapsed") == 2
    assert err.count("SyncExecuteTimer: torch.nn.functional.linear backward elapsed") == 2
    assert "replay summary" in err and "1 cases: 1 pass" in err
    rows = (next((tmp_path / "res" / "op_replay").iterdir()) / "results.jsonl").read_text().splitlines()
    assert len(rows) == 1 and '"status": "PASS"' in rows[0]
