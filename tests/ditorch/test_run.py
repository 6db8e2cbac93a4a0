"""``ditorch run [options] -- script.py args`` and ``python -m ditorch script.py args``: argv, sys.path,
exit status and exceptions behave as with ``python script.py args``, with ditorch imported first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ditorch import cli, run

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import helper_module                       # found next to the script: its directory is on sys.path
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "raise":
        raise ValueError("boom from the script")
    print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0], "file": __file__,
                      "ditorch_loaded": "ditorch" in sys.modules, "helper": helper_module.VALUE}))
    if mode == "exit":
        sys.exit(int(sys.argv[2]))
    if mode == "exit-message":
        sys.exit("bye from the script")
""")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "user_script.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    (path.parent / "helper_module.py").write_text("VALUE = 42\n")
    return path


def python_m_ditorch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DITORCH_QUIET": "1"}
    return subprocess.run([sys.executable, "-m", "ditorch", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def report(proc: subprocess.CompletedProcess[str]) -> dict:
    line = next(line for line in proc.stdout.splitlines() if line.startswith("{"))
    return json.loads(line)


# -- in process ----------------------------------------------------------------------------------------

def test_run_script_sets_argv_path_and_name_then_restores(script, capsys):
    argv, path = sys.argv[:], sys.path[:]
    assert run.run_script(str(script), ["a", "--flag", "-x"]) == 0
    seen = json.loads(capsys.readouterr().out)
    assert seen["argv"] == [str(script), "a", "--flag", "-x"]
    assert seen["name"] == "__main__"
    assert seen["path0"] == str(script.parent.resolve())
    assert seen["file"] == str(script)
    assert seen["ditorch_loaded"] and seen["helper"] == 42
    assert sys.argv == argv and sys.path == path


def test_run_script_propagates_system_exit_and_exceptions(script, capsys):
    argv, path = sys.argv[:], sys.path[:]
    with pytest.raises(SystemExit) as exit_info:
        run.run_script(str(script), ["exit", "7"])
    assert exit_info.value.code == 7
    with pytest.raises(ValueError, match="boom from the script"):
        run.run_script(str(script), ["raise"])
    assert sys.argv == argv and sys.path == path


def test_missing_script_is_reported(tmp_path, capsys):
    assert run.run_script(str(tmp_path / "missing.py")) == run.EXIT_NO_SCRIPT
    assert "can't open file" in capsys.readouterr().err


def test_run_parser_keeps_options_before_the_separator():
    parser = cli.build_parser()
    args = parser.parse_args(["run", "--", "train.py", "--lr", "3", "--", "x"])
    assert args.command[args.command.index("train.py"):] == ["train.py", "--lr", "3", "--", "x"]
    args = parser.parse_args(["run", "train.py", "--help"])  # after the script, --help is the script's
    assert args.command == ["train.py", "--help"]


def test_handle_without_script(capsys):
    assert cli.main(["run"]) == run.EXIT_NO_SCRIPT
    assert cli.main(["run", "--"]) == run.EXIT_NO_SCRIPT
    assert "no script given" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "expected"), [
    (["train.py", "a"], ["train.py", "a"]),
    (["--", "train", "a"], ["train", "a"]),
    (["demo", "--steps", "1"], None),
    (["run", "x.py"], None),
    (["--help"], None),
    (["not-a-command"], None),
    ([], None),
])
def test_split_script_argv(argv, expected):
    assert run.split_script_argv(argv, ["demo", "run", "info"]) == expected


# -- subprocesses: the real command line ---------------------------------------------------------------

@pytest.mark.parametrize("launcher", [("run", "--"), ("run",), ()], ids=["run --", "run", "python -m ditorch"])
def test_argv_and_exit_status(script, launcher):
    proc = python_m_ditorch(*launcher, str(script), "exit", "3", "--verbose")
    assert proc.returncode == 3, proc.stderr
    seen = report(proc)
    assert seen["argv"] == [str(script), "exit", "3", "--verbose"]
    assert seen["name"] == "__main__" and seen["ditorch_loaded"] and seen["helper"] == 42

    proc = python_m_ditorch(*launcher, str(script))
    assert proc.returncode == 0, proc.stderr

    proc = python_m_ditorch(*launcher, str(script), "exit-message")
    assert proc.returncode == 1 and "bye from the script" in proc.stderr


@pytest.mark.parametrize("launcher", [("run", "--"), ()], ids=["run", "python -m ditorch"])
def test_exception_propagates(script, launcher):
    proc = python_m_ditorch(*launcher, str(script), "raise")
    assert proc.returncode == 1
    assert "ValueError: boom from the script" in proc.stderr
    assert "Traceback" in proc.stderr


def test_python_m_ditorch_script_equals_ditorch_run(script, tmp_path):
    relative = os.path.relpath(script, tmp_path)
    via_run = python_m_ditorch("run", "--", relative, "x", cwd=tmp_path)
    via_module = python_m_ditorch(relative, "x", cwd=tmp_path)
    assert via_run.returncode == via_module.returncode == 0, via_run.stderr + via_module.stderr
    assert report(via_run) == report(via_module)
    assert report(via_run)["argv"] == [relative, "x"]


def test_commands_still_reach_the_cli():
    assert "run" in python_m_ditorch("--help").stdout
    proc = python_m_ditorch("run", "--help")
    assert proc.returncode == 0
    assert "script.py" in proc.stdout and "--" in proc.stdout
    proc = python_m_ditorch("not-a-command")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_missing_script_exit_status(tmp_path):
    for launcher in (("run", "--"), ()):
        proc = python_m_ditorch(*launcher, str(tmp_path / "missing.py"))
        assert proc.returncode == 2 and "can't open file" in proc.stderr
