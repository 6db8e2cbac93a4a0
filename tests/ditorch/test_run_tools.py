"""``ditorch run --autocompare / --overflow-check / --fallback / --dtype-cast -- script.py``: op_tools' checking
tools on a whole unmodified script (in subprocesses, results under ``OP_TOOLS_RESULTS_DIR``), and the option
parsing and start/stop order in process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ditorch import cli, run

# Trains a small model on the accelerator (dipu here) for two steps and prints its loss; no CUDA anywhere.
TRAIN = textwrap.dedent("""
    import argparse
    import sys

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--exit", type=int, default=None)
    args = parser.parse_args()
    device = args.device or torch.accelerator.current_accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8).to(device), torch.randn(32, 1).to(device)
    for _ in range(2):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"loss {loss.item():.6f} on {loss.device.type}")
    if args.exit is not None:
        sys.exit(args.exit)
""")
NAN = textwrap.dedent("""
    import torch

    x = torch.rand(4, device=torch.accelerator.current_accelerator()) + 0.5
    y = torch.log(-x)
    print("all nan:", bool(torch.isnan(y).all()))
""")
BF16 = textwrap.dedent("""
    import torch

    device = torch.accelerator.current_accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device, torch.bfloat16)
    out = model(torch.randn(2, 8).to(device, torch.bfloat16))
    print("dtype", out.dtype, out.device.type)
""")
LOSS = re.compile(r"^loss (\S+) on (\w+)$", re.MULTILINE)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def ditorch_run(*args: str, results: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OP_", "DROPLET_"))}
    full_env.update(DITORCH_QUIET="1", OP_TOOLS_RESULTS_DIR=str(results), **env)
    return subprocess.run([sys.executable, "-m", "ditorch", "run", *args], capture_output=True, text=True,
                          timeout=180, env=full_env)


def result_rows(results: Path, tool: str) -> list[dict]:
    files = sorted(results.glob(f"{tool}/*/rank0/results.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def loss_of(output: str, device: str) -> float:
    match = LOSS.search(output)
    assert match is not None and match.group(2) == device, output
    return float(match.group(1))


# -- subprocesses --------------------------------------------------------------------------------------

def test_autocompare_checks_the_whole_script_and_stops_on_sys_exit(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    proc = ditorch_run("--autocompare", "--", str(script), "--exit", "3", results=tmp_path / "results")
    assert proc.returncode == 3, proc.stderr  # the script's own exit status, after the tool stopped
    loss_of(proc.stdout, "dipu")
    assert re.search(r"^OpAutoCompare: \d+ checks: \d+ PASS; results in ", proc.stderr, re.MULTILINE), proc.stderr
    rows = result_rows(tmp_path / "results", "op_autocompare")
    verdicts = [r["verdict"] for r in rows]
    assert verdicts.count("PASS") > 10 and "FAIL" not in verdicts, verdicts
    names = {r["name"] for r in rows}
    assert {"torch.nn.functional.linear", "torch.nn.functional.mse_loss"} <= names, names
    assert {r["phase"] for r in rows} == {"forward", "backward"}
    assert next((tmp_path / "results").glob("op_autocompare/*/rank0/report.html")).is_file()


def test_overflow_check_names_the_op_that_made_the_nan(tmp_path):
    script = write(tmp_path, "nan.py", NAN)
    proc = ditorch_run("--overflow-check", "--", str(script), results=tmp_path / "results")
    assert proc.returncode == 0, proc.stderr
    assert "all nan: True" in proc.stdout
    assert re.search(r"^OpOverflowCheck: first producer: torch\.log #\d+ forward", proc.stderr, re.MULTILINE), \
        proc.stderr
    rows = result_rows(tmp_path / "results", "op_overflow_check")
    assert [(r["name"], r["verdict"]) for r in rows] == [("torch.log", "FAIL")]


def test_fallback_of_the_faulty_op_gives_the_cpu_result(tmp_path, capsys):
    script = write(tmp_path, "train.py", TRAIN)
    assert run.run_script(str(script), ["--device", "cpu"]) == 0  # the expected result, on the CPU
    expected = loss_of(capsys.readouterr().out, "cpu")
    fault = {"DROPLET_FAULTS": "mm:bias:0.5"}
    faulty = ditorch_run("--", str(script), results=tmp_path / "results", **fault)
    assert faulty.returncode == 0, faulty.stderr
    assert loss_of(faulty.stdout, "dipu") != pytest.approx(expected, abs=1e-3)  # the fault shows without the tool
    fixed = ditorch_run("--fallback", "torch.nn.functional.linear", "--", str(script), results=tmp_path / "results",
                        **fault)
    assert fixed.returncode == 0, fixed.stderr
    assert loss_of(fixed.stdout, "dipu") == pytest.approx(expected, abs=1e-6)
    assert re.search(r"^OpFallback: [1-9]\d* calls ran on the CPU", fixed.stderr, re.MULTILINE), fixed.stderr
    assert {r["name"] for r in result_rows(tmp_path / "results", "op_fallback")} == {"torch.nn.functional.linear"}


def test_dtype_cast_keeps_the_result_dtype(tmp_path):
    script = write(tmp_path, "bf16.py", BF16)
    proc = ditorch_run("--dtype-cast", "torch.bfloat16->torch.float32", "--", str(script),
                       results=tmp_path / "results")
    assert proc.returncode == 0, proc.stderr
    assert "dtype torch.bfloat16 dipu" in proc.stdout
    assert re.search(r"^OpDtypeCast: [1-9]\d* calls ran with cast dtypes", proc.stderr, re.MULTILINE), proc.stderr
    rows = result_rows(tmp_path / "results", "op_dtype_cast")
    assert ("torch.nn.functional.linear", "ran in bfloat16->float32") in {(r["name"], r["message"]) for r in rows}


# -- in process ----------------------------------------------------------------------------------------

def parse(*argv: str):
    return cli.build_parser().parse_args(["run", *argv])


def test_tool_options_come_before_the_script():
    args = parse("--autocompare", "--fallback", "torch.mm, torch.nn.functional.linear", "--", "x.py",
                 "--overflow-check", "--fallback", "y")
    assert (args.autocompare, args.overflow_check, args.dtype_cast) == (True, False, None)
    assert args.fallback == "torch.mm,torch.nn.functional.linear"
    assert args.command == ["--", "x.py", "--overflow-check", "--fallback", "y"]  # the script's own options


@pytest.mark.parametrize("argv, message", [
    (["--fallback", "torch.(", "x.py"], "not a valid regular expression"),
    (["--fallback", " , ", "x.py"], "at least one op"),
    (["--dtype-cast", "torch.float16", "x.py"], "not 'from->to'"),
    (["--dtype-cast", "torch.int32->torch.float32", "x.py"], "not a floating dtype"),
    (["--dtype-cast", "torch.float32->torch.float32", "x.py"], "casts nothing"),
])
def test_malformed_tool_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_build_tools_in_start_order():
    assert run.build_tools(parse("x.py")) == []
    tools = run.build_tools(parse("--fallback", "torch.mm", "--dtype-cast", "torch.float16->torch.float32",
                                  "--overflow-check", "--autocompare", "x.py"))
    assert [type(t).__name__ for t in tools] == ["OpAutoCompare", "OpOverflowCheck", "OpDtypeCast", "OpFallback"]
    assert tools[-1].filter.include_entries == ["torch.mm"]


class Recorder:
    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events

    def __enter__(self) -> None:
        self.events.append(f"start {self.name}")

    def __exit__(self, *exc: object) -> None:
        self.events.append(f"stop {self.name}")


@pytest.mark.parametrize("body, raises", [("import sys; sys.exit(4)", SystemExit), ("raise KeyError('x')", KeyError),
                                          ("print('ok')", None)])
def test_tools_stop_however_the_script_ends(tmp_path, body, raises):
    script = write(tmp_path, "script.py", body + "\n")
    events: list[str] = []
    tools = [Recorder("a", events), Recorder("b", events)]
    if raises is None:
        assert run.run_script(str(script), [], tools) == 0
    else:
        with pytest.raises(raises):
            run.run_script(str(script), [], tools)
    assert events == ["start a", "start b", "stop b", "stop a"]
