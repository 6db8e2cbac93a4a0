"""``ditorch profile [options] -- script.py args``: the script runs under torch.profiler, a Chrome/Perfetto
trace with the script's op names (API calls and DIOPI kernels) is written, the summary table is printed, and
the script's exit status propagates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ditorch import cli, profiling

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import torch_dipu
    x = torch.randn(4, 8, device="dipu")
    w = torch.randn(3, 8, device="dipu")
    y = torch.nn.functional.linear(x, w).relu().sum()
    print("script result", float(y))
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "raise":
        raise ValueError("boom from the script")
    if mode == "exit":
        sys.exit(int(sys.argv[2]))
""")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "profiled_script.py"
    path.write_text(SCRIPT)
    return path


def ditorch(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("DIPU_", "DROPLET_", "OP_"))}
    full_env.update({"DITORCH_QUIET": "1", **(env or {})})
    return subprocess.run([sys.executable, "-m", "ditorch", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd, env=full_env)


def names(path: Path) -> set[str]:
    with open(path) as f:
        return {e.get("name") for e in json.load(f)["traceEvents"]}


def test_profile_writes_trace_prints_table_and_propagates_exit_status(script, tmp_path):
    out = tmp_path / "traces" / "t.json"
    proc = ditorch("profile", "--out", str(out), "--top", "7", "--", str(script), "exit", "3", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "script result" in proc.stdout
    seen = names(out)
    assert {"torch.nn.functional.linear", "torch.Tensor.relu", "torch.Tensor.sum", "torch.randn"} <= seen
    assert {"diopiLinear", "diopiRelu", "diopiSum"} <= seen
    assert "Self CPU time total" in proc.stderr and "Name" in proc.stderr
    table = proc.stderr.split("Self CPU time total")[0]
    header = next(i for i, line in enumerate(table.splitlines()) if "Name" in line)
    rows = [line for line in table.splitlines()[header + 2:] if line.strip() and not line.startswith("-")]
    assert len(rows) == 7
    assert f"trace written to {out}" in proc.stderr


def test_default_path_in_results_dir_and_exception_still_writes_the_trace(script, tmp_path):
    results = tmp_path / "results"
    proc = ditorch("profile", "--sort", "cpu_time_total", "--", str(script), "raise", cwd=tmp_path,
                   env={"OP_TOOLS_RESULTS_DIR": str(results)})
    assert proc.returncode == 1
    assert "ValueError: boom from the script" in proc.stderr
    traces = list(results.glob("ditorch_profile_*.json"))
    assert len(traces) == 1, proc.stderr
    assert "torch.nn.functional.linear" in names(traces[0])
    assert f"trace written to {traces[0]}" in proc.stderr


def test_default_path_in_cwd_and_forced_fallback_named(script, tmp_path):
    proc = ditorch("profile", "--", str(script), cwd=tmp_path, env={"DIPU_FORCE_FALLBACK_OPS_LIST": "linear"})
    assert proc.returncode == 0, proc.stderr
    traces = list(tmp_path.glob("ditorch_profile_*.json"))
    assert len(traces) == 1
    seen = names(traces[0])
    assert "fallback::aten.linear" in seen and "diopiLinear" not in seen
    assert "torch.nn.functional.linear" in seen


def test_combined_with_a_checking_tool_and_relative_out(script, tmp_path):
    # a relative --out is taken from the directory ditorch started in, even when the script changes it
    script.write_text("import os\nos.chdir(os.path.dirname(os.path.abspath(__file__)) + '/sub')\n" + SCRIPT)
    (tmp_path / "sub").mkdir()
    proc = ditorch("profile", "--out", "rel/t.json", "--overflow-check", "--", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "OpOverflowCheck" in proc.stderr
    assert "torch.nn.functional.linear" in names(tmp_path / "rel" / "t.json")


def test_no_script_or_missing_script(tmp_path):
    proc = ditorch("profile", cwd=tmp_path)
    assert proc.returncode == 2 and "no script given" in proc.stderr
    proc = ditorch("profile", "--", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert proc.returncode == 2 and "can't open file" in proc.stderr
    assert not list(tmp_path.glob("ditorch_profile_*.json"))


def test_parser_options():
    args = cli.build_parser().parse_args(["profile", "--top", "3", "--sort", "cpu_time_total", "--", "x.py", "-a"])
    assert (args.top, args.sort, args.out) == (3, "cpu_time_total", None)
    assert args.command == ["--", "x.py", "-a"]
    for bad in (["--top", "0"], ["--sort", "count"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["profile", *bad, "--", "x.py"])


def test_default_trace_path_is_unique(tmp_path, monkeypatch):
    monkeypatch.setenv("OP_TOOLS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    first = profiling.default_trace_path()
    assert first.parent == tmp_path and first.name.startswith("ditorch_profile_") and "_rank1" in first.name
    first.write_text("{}")
    second = profiling.default_trace_path()
    assert second != first and second.name.endswith("-1.json")
