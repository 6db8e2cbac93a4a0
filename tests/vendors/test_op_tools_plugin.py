"""op_tools and module_tools on torch_openreg, a C++ PrivateUse1 plugin nobody here wrote (device ``openreg``).

The tools are used as on any device, on ``device="openreg"`` tensors, without ``import ditorch``. Each test asserts
what the tool found, not only that it ran: verdict counts from ``results.jsonl``, equality to the CPU, the module
named. To show that a checking tool finds a wrong operator on this plugin, a deliberately wrong kernel is put
over the plugin's own for the PrivateUse1 key (``wrong_kernel.py``).

What openreg is like (and the tools had to cope with): its kernels are the CPU's (a boxed CPU fallback), so a
right result is bitwise the CPU's; its ``torch.openreg`` module has no ``synchronize``, no ``Event`` and no memory
statistics, but ``torch.Event(enable_timing=True)`` and ``torch.Stream`` work; ``torch.accelerator.synchronize()``
raises once the device is initialised (its device guard restores device -1); its ``abs``/``isfinite`` take float32
only; its random kernels draw from the CPU's generator.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from wrong_kernel import BIAS, biased_gelu, mm_in_float64, privateuse1_kernel, recording

import op_tools
from diopi import case_format as cf
from module_tools import ModuleDump
from module_tools.compare import compare_runs
from module_tools.compare_command import main as compare_main
from op_tools import device_sync
from op_tools.replay import ReplayOptions, replay_case
from op_tools.tensor_stats import tensor_stats

DEVICE = "openreg"
ROOT = Path(__file__).resolve().parents[2]
LINEAR, LAYER_NORM, GELU = "torch.nn.functional.linear", "torch.nn.functional.layer_norm", "torch.nn.functional.gelu"
SOFTMAX, CROSS_ENTROPY, FOREACH_ADD = "torch.softmax", "torch.nn.functional.cross_entropy", "torch._foreach_add_"

# One training step of MLP (below) checked by OpAutoCompare: (op, phase) -> rows. Backward rows are one per input
# gradient: linear 3 (input, weight, bias; 2 for the first, whose input needs none), layer_norm 3 (input, weight,
# bias). SGD's update is one _foreach_add_: its 6 results and its 12 inputs (parameters, gradients) after the call.
STEP_ROWS = {(LINEAR, "forward"): 2, (LAYER_NORM, "forward"): 1, (GELU, "forward"): 1, (SOFTMAX, "forward"): 1,
             (CROSS_ENTROPY, "forward"): 1, (CROSS_ENTROPY, "backward"): 1, (SOFTMAX, "backward"): 1,
             (LINEAR, "backward"): 5, (GELU, "backward"): 1, (LAYER_NORM, "backward"): 3, (FOREACH_ADD, "forward"): 18}


class MLP(torch.nn.Module):
    """Linear, LayerNorm, GELU, Linear; the loss is cross-entropy of the softmax (every op has a backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.norm(self.fc1(x))))


class HalfMLP(torch.nn.Module):
    """For bfloat16 autocast on openreg, which autocasts ``mm`` only: bias-free linears (``mm``), the LayerNorm on the
    float32 input (openreg's layer_norm of a bfloat16 input with float32 weights returns float32 and its backward
    raises, without any tool). Wide enough that a float32 accumulation rounds some bfloat16 products differently
    from a float64 one (about 1 element in 4,000 of the first linear's output)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(1024)
        self.fc1 = torch.nn.Linear(1024, 256, bias=False)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(256, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(self.norm(x))))


def _setup(cls: type[torch.nn.Module] = MLP, batch: int = 8, device: str = DEVICE
           ) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """The model, SGD, inputs and targets, the same numbers on every device (drawn on the CPU from seed 0)."""
    torch.default_generator.manual_seed(0)  # the CPU's only: torch.manual_seed warns about openreg's module
    model = cls()
    width = model.fc1.in_features
    x, y = torch.randn(batch, width), torch.randint(0, model.fc2.out_features, (batch,))
    model = model.to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), x.to(device), y.to(device)


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(torch.softmax(model(x), -1), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _half_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        logits = model(x)
        assert logits.dtype == torch.bfloat16  # autocast is on: the linears ran in bfloat16
        loss = F.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad()


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _by_op(rows: list[dict[str, Any]], verdict: str | None = None) -> collections.Counter:
    return collections.Counter((r["name"], r["phase"]) for r in rows if verdict is None or r["verdict"] == verdict)


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OP_TOOLS_RESULTS_DIR", str(tmp_path))


def test_the_plugin_is_the_accelerator() -> None:
    assert torch._C._get_privateuse1_backend_name() == DEVICE
    assert torch.accelerator.current_accelerator().type == DEVICE and torch.accelerator.device_count() == 2


# -- OpAutoCompare --------------------------------------------------------------------------------------------------
def test_autocompare_passes_every_check_of_two_training_steps(tmp_path: Path) -> None:
    model, opt, x, y = _setup()
    with op_tools.OpAutoCompare(run_id="fp32") as tool:
        for _ in range(2):
            _train_step(model, opt, x, y)
    run_dir = tmp_path / "op_autocompare" / "fp32" / "rank0"
    assert tool.run_dir == run_dir
    assert sorted(p.name for p in run_dir.iterdir()) == ["report.html", "results.csv", "results.jsonl"]
    rows = _rows(run_dir)
    assert _by_op(rows) == {key: 2 * n for key, n in STEP_ROWS.items()}
    assert tool.counts == {"PASS": len(rows)} == {"PASS": 2 * sum(STEP_ROWS.values())}
    assert {r["step"] for r in rows} == {1, 2}
    assert (run_dir / "results.csv").read_text().count("\n") == len(rows) + 1


def test_autocompare_names_a_wrong_kernel_of_the_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, opt, x, y = _setup()
    with privateuse1_kernel("gelu", biased_gelu), op_tools.OpAutoCompare(run_id="wrong") as tool:
        _train_step(model, opt, x, y)
    rows = _rows(tool.run_dir)
    assert _by_op(rows) == STEP_ROWS
    (fail,) = [r for r in rows if r["verdict"] == "FAIL"]  # every other op is judged on its own inputs: PASS
    assert (fail["name"], fail["phase"], fail["index"]) == (GELU, "forward", "out")
    assert fail["max_abs_diff"] == pytest.approx(BIAS, abs=1e-6)
    assert tool.counts == {"PASS": len(rows) - 1, "FAIL": 1}
    case_dir = tool.run_dir / fail["case_dir"]
    assert case_dir.parent.name == GELU and cf.load_case(case_dir).record["device"] == f"{DEVICE}:0"
    assert f"first FAIL: {GELU} #{fail['id']} forward out" in capsys.readouterr().err


def test_bfloat16_autocast_has_no_false_fail_and_still_finds_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, x, y = _setup(HalfMLP, batch=512)
    with op_tools.OpAutoCompare(run_id="bf16") as plain:  # openreg's own kernels
        _half_step(model, opt, x, y)
    assert plain.counts == {"PASS": len(_rows(plain.run_dir))}

    # A right mm that rounds differently from the CPU's, judged with no tolerance at all in bfloat16: every
    # difference has to be justified by the noise floor (error against float64 no worse than twice the CPU's).
    monkeypatch.setenv("AUTOCOMPARE_ERROR_TOLERANCE_BFLOAT16", "0,0")
    with privateuse1_kernel("mm", mm_in_float64), op_tools.OpAutoCompare(run_id="bf16-mm") as rounded:
        for _ in range(2):
            _half_step(model, opt, x, y)
    rows = _rows(rounded.run_dir)
    assert "FAIL" not in rounded.counts and rounded.counts.get("NOISE", 0) >= 1
    assert {r["name"] for r in rows if r["verdict"] == "NOISE"} == {LINEAR}

    with privateuse1_kernel("gelu", biased_gelu), op_tools.OpAutoCompare(run_id="bf16-gelu") as wrong:
        _half_step(model, opt, x, y)
    assert _by_op(_rows(wrong.run_dir), "FAIL") == {(GELU, "forward"): 1}


# -- OpCapture and replay -------------------------------------------------------------------------------------------
def _replay(command: list[str], target: Path, results: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "OP_TOOLS_RESULTS_DIR": str(results)}
    done = subprocess.run([sys.executable, *command, str(target)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = (results / "op_replay").iterdir()
    return _rows(run)


def test_capture_of_a_training_step_replays_on_the_plugin(tmp_path: Path) -> None:
    model, opt, x, y = _setup()
    with op_tools.OpCapture(run_id="step") as cap:
        _train_step(model, opt, x, y)
        x.t().exp()  # a non-contiguous input: x.t() has strides (1, 16)
    index = [json.loads(line) for line in (cap.run_dir / "cases.jsonl").read_text().splitlines()]
    # linear x2, layer_norm, gelu, softmax, cross_entropy, _foreach_add_, t, exp
    assert cap.captured == cap.cases_written == len(index) == 9
    records = {row["id"]: cf.load_case(cap.run_dir / row["dir"]).record for row in index}
    assert {r["device"] for r in records.values()} == {f"{DEVICE}:0"}
    assert {m["device"] for r in records.values() for m in r["tensors"].values()} == {f"{DEVICE}:0"}
    (exp_id,) = [i for i, r in records.items() if r["op"] == "torch.Tensor.exp"]
    assert records[exp_id]["tensors"]["i0"]["stride"] == [1, 16]

    for name, command in (("module", ["-m", "op_tools.run_op_from_data"]), ("cli", ["-m", "ditorch", "replay"])):
        rows = _replay(command, cap.run_dir.parent, tmp_path / name)
        assert len(rows) == len(index) and {r["status"] for r in rows} == {"PASS"}, rows
        assert {r["device"] for r in rows} == {f"{DEVICE}:0"} and all(r["bitwise_forward"] for r in rows)
        assert sum(r["backward"] == "PASS" for r in rows) == sum(r["backward"] is not None for r in records.values())

    seen: list[tuple[tuple[int, ...], bool]] = []
    exp_case = cap.run_dir / next(row["dir"] for row in index if row["id"] == exp_id)
    with privateuse1_kernel("exp", recording(torch.ops.aten.exp.default, seen)):
        result = replay_case(exp_case, ReplayOptions())
    assert result.status == "PASS" and result.bitwise_forward and result.device == f"{DEVICE}:0"
    assert seen == [((1, 16), False)]  # the plugin's kernel got the non-contiguous input


# -- OpFallback -----------------------------------------------------------------------------------------------------
def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device.type == DEVICE
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=0, atol=0)


def test_fallback_runs_a_wrong_kernel_on_the_cpu_forward_and_backward(tmp_path: Path) -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    xc, xd = x.clone().requires_grad_(), x.to(DEVICE).requires_grad_()
    F.gelu(xc).sum().backward()
    with privateuse1_kernel("gelu", biased_gelu):
        _exact(F.gelu(xd), F.gelu(x) + BIAS)  # the kernel is wrong on the device
        with op_tools.OpFallback(ops=GELU, run_id="fb") as fb:
            y = F.gelu(xd)
        assert y.requires_grad
        _exact(y, F.gelu(x))
        y.sum().backward()
    _exact(xd.grad, xc.grad)
    assert [(r["name"], r["message"], r["dtype"]) for r in fb.results] == [(GELU, "ran on cpu", "float32")]
    assert fb.table.run_dir == tmp_path / "op_fallback" / "fb" / "rank0"


def test_fallback_keeps_inplace_writes_views_and_running_statistics() -> None:
    bn_cpu = torch.nn.BatchNorm1d(3)
    bn = copy.deepcopy(bn_cpu).to(DEVICE)
    data = torch.randn(8, 3, generator=torch.Generator().manual_seed(2))
    with op_tools.OpFallback() as fb:
        b = torch.ones(3, device=DEVICE)
        assert b.add_(torch.ones(3, device=DEVICE)) is b
        params = [torch.nn.Parameter(torch.zeros(2, device=DEVICE)) for _ in range(2)]
        with torch.no_grad():
            torch._foreach_add_(params, 1.5)
        base = torch.zeros(2, 4, device=DEVICE)
        row = base[1]  # a view: runs on the device
        row.add_(5)
        c = torch.zeros(4, device=DEVICE)
        c[1:3] = torch.ones(2, device=DEVICE)
        out = torch.empty(4, device=DEVICE)
        assert torch.add(c, 1, out=out) is out
        bn(data.to(DEVICE))
    bn_cpu(data)
    _exact(b, torch.full((3,), 2.0))
    _exact(params[1], torch.full((2,), 1.5))
    assert row._base is base
    _exact(base, torch.tensor([[0.0] * 4, [5.0] * 4]))
    _exact(c, torch.tensor([0.0, 1.0, 1.0, 0.0]))
    _exact(out, torch.tensor([1.0, 2.0, 2.0, 1.0]))
    _exact(bn.running_mean, bn_cpu.running_mean)
    _exact(bn.running_var, bn_cpu.running_var)
    assert int(bn.num_batches_tracked) == 1  # BatchNorm's own num_batches_tracked.add_(1)
    assert [r["name"] for r in fb.results] == ["torch.Tensor.add_", FOREACH_ADD, "torch.Tensor.add_",
                                               "torch.Tensor.__setitem__", "torch.add", "torch.Tensor.add_",
                                               "torch.nn.functional.batch_norm"]


def test_fallback_random_calls_draw_what_the_plugin_would() -> None:
    """openreg's random kernels draw from the CPU's generator: under OpFallback the masks and the CPU's state
    after them are those of the run without it."""
    ones = torch.ones(64, device=DEVICE)
    torch.default_generator.manual_seed(3)
    plain = [F.dropout(ones, 0.5).cpu() for _ in range(2)]
    plain_state = torch.get_rng_state()
    torch.default_generator.manual_seed(3)
    with op_tools.OpFallback() as fb:
        fallen = [F.dropout(ones, 0.5).cpu() for _ in range(2)]
    assert fb.fallen_back == 2 and not torch.equal(plain[0], plain[1])
    assert all(torch.equal(a, b) for a, b in zip(plain, fallen, strict=True))
    assert torch.equal(torch.get_rng_state(), plain_state)


# -- OpTimeMeasure --------------------------------------------------------------------------------------------------
def test_time_measure_uses_the_plugins_timing_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert not hasattr(torch.get_device_module(DEVICE), "Event")  # only torch.Event has them
    monkeypatch.setattr(device_sync, "_ACCELERATOR_SYNCS", {})  # the fallback's line is said once per process
    model, opt, x, y = _setup()
    _train_step(model, opt, x, y)  # the device is initialised: torch.accelerator.synchronize() may now raise
    try:
        torch.accelerator.synchronize()
        guard_syncs = True
    except RuntimeError:
        guard_syncs = False
    for mode in ("event", "sync"):
        tool = op_tools.OpTimeMeasure(run_id=mode, mode=None if mode == "event" else mode, top=0)
        assert tool.mode == mode
        with tool:
            _train_step(model, opt, x, y)
        rows = _rows(tool.run_dir)
        forward = {k for k, n in STEP_ROWS.items() if k[1] == "forward"}
        backward = {(name, "backward") for name, phase in forward if name != FOREACH_ADD}
        assert set(_by_op(rows)) == forward | backward
        assert all(r["elapsed_ms"] > 0 for r in rows), rows
        assert all(e["total_ms"] > 0 for e in tool.summary())
        assert (tool.run_dir / "summary.csv").is_file() and (tool.run_dir / "timing_report.html").is_file()
    err = capsys.readouterr().err
    assert "OpTimeMeasure (event mode):" in err and "OpTimeMeasure (sync mode):" in err
    assert err.count("synchronizing stream by stream instead") == (0 if guard_syncs else 1)


# -- OpCapture statistics -------------------------------------------------------------------------------------------
def test_capture_statistics_of_dtypes_the_plugin_cannot_reduce(recwarn: pytest.WarningsRecorder) -> None:
    """bfloat16 logits and int64 targets: openreg's isfinite takes float32 only, so they are reduced as float32."""
    g = torch.Generator().manual_seed(4)
    logits, target = torch.randn(16, 10, generator=g).bfloat16(), torch.randint(0, 10, (16,), generator=g)
    on_device = logits.to(DEVICE), target.to(DEVICE)
    with op_tools.OpCapture(run_id="stats", mode="stats") as cap:
        loss = F.cross_entropy(*on_device)
    assert not [w for w in recwarn if "OpCapture failed" in str(w.message)]
    (row,) = [json.loads(line) for line in (cap.run_dir / "stats.jsonl").read_text().splitlines()]
    want = {"i0": logits, "i1": target, "o0": loss.cpu()}
    assert row["op"] == CROSS_ENTROPY and set(row["tensors"]) == set(want)
    for key, t in want.items():
        got, ref = row["tensors"][key], tensor_stats(t)
        for stat in ("min", "max", "mean", "std", "norm"):
            assert got[stat] == pytest.approx(ref[stat], rel=1e-5, abs=1e-6), (key, stat)
        assert (got["numel"], got["nan"], got["inf"]) == (t.numel(), 0, 0)


# -- module_tools -------------------------------------------------------------------------------------------------
def _dump(device: str, out: Path, stats_only: bool = False, steps: int = 2) -> list[torch.Tensor]:
    model, opt, x, y = _setup(device=device)
    losses = []
    with ModuleDump(model, out, stats_only=stats_only) as dump:
        for _ in range(steps):
            losses.append(_train_step(model, opt, x, y).detach().cpu())
            dump.step()
    return losses


def test_module_dumps_of_the_plugin_and_the_cpu_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpu_losses = _dump("cpu", tmp_path / "cpu")
    torch.testing.assert_close(torch.stack(_dump(DEVICE, tmp_path / DEVICE)), torch.stack(cpu_losses))
    result = compare_runs(tmp_path / "cpu", tmp_path / DEVICE)
    assert result.summary() == "no divergence in 2 steps"
    assert len(result.forward) == 2 * 5 and len(result.backward) == 2 * 5  # MLP and its 4 modules, each step
    assert {e.verdict.value for e in [*result.forward, *result.backward]} == {"PASS"}
    assert compare_main([str(tmp_path / "cpu"), str(tmp_path / DEVICE)]) == 0
    _dump("cpu", tmp_path / "cpu-stats", stats_only=True)
    _dump(DEVICE, tmp_path / "stats", stats_only=True)
    assert compare_runs(tmp_path / "cpu-stats", tmp_path / "stats").summary() == \
        "no divergence in 2 steps (statistics only)"

    with privateuse1_kernel("gelu", biased_gelu):
        _dump(DEVICE, tmp_path / "wrong", steps=1)
    first = compare_runs(tmp_path / "cpu", tmp_path / "wrong").first_divergence["forward"]
    assert (first["module"], first["class"], first["step"], first["tensor"]) == ("act", "GELU", 1, "output.0")
    assert first["max_abs_diff"] == pytest.approx(BIAS, abs=1e-6)
    capsys.readouterr()
    assert compare_main([str(tmp_path / "cpu"), str(tmp_path / "wrong")]) == 1
    assert "first divergence (forward): step 1, module 'act' (GELU)" in capsys.readouterr().out
