"""The ``ditorch`` command line's errors (docs/cli.md, "Errors and exit statuses"): a user error is one line and exit
status 2 (DITORCH_DEBUG=1: with its traceback), a script's exception keeps Python's report, an internal error says
it is one; ``--help`` answers without torch; parity names the run that failed; from-capture's next command runs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_dipu  # noqa: F401  (registers the dipu device)
from diopi.env import ConfigError
from ditorch import cli
from ditorch.arguments import ArgumentParser

BIN = Path(sys.executable).parent


def _clean_env(**extra: str) -> dict[str, str]:
    prefixes = ("DIPU_", "DROPLET_", "OP_", "DITORCH_", "MODULE_DUMP_", "PYTEST_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(prefixes)}, **extra}


def _imported(*argv: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime -m ditorch argv``: the process and the names of the modules it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ditorch", *argv], capture_output=True,
                          text=True, env=_clean_env(), cwd=cwd, timeout=120)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, modules


# -- no torch for --help and for a malformed option ---------------------------------------------------------------

def test_help_imports_no_torch_and_prints_no_banner():
    proc, modules = _imported("--help")
    assert proc.returncode == 0, proc.stderr
    assert "demo" in proc.stdout and "conformance" in proc.stdout
    assert "torch" not in modules and "diopi" not in modules, sorted(m for m in modules if "torch" in m)
    assert "pid:" not in proc.stderr  # no device banner


@pytest.mark.parametrize("argv, line", [
    (("demo", "--lr", "nan"), "ditorch demo: error: argument --lr: expected a finite number greater than 0"),
    (("info", "--json", "x.json"), "ditorch info: error: --json is the probe's output: use it with --probe"),
    (("generate", "--model", "gpt5", "--prompt", "x"), "ditorch generate: error: --model 'gpt5': neither a tiny"),
    (("run", "--", "missing.py"), "ditorch run: error: can't open file 'missing.py': No such file"),
])
def test_a_malformed_option_answers_before_torch(tmp_path, argv, line):
    (tmp_path / "train.py").write_text("print('never runs')\n")
    proc, modules = _imported(*argv, cwd=tmp_path)
    errors = [x for x in proc.stderr.splitlines() if not x.startswith("import time:")]
    assert proc.returncode == 2 and errors and errors[0].startswith(line), proc.stderr
    assert len(errors) == 1 and "torch" not in modules


def test_bare_ditorch_prints_the_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: ditorch")
    assert captured.err == "ditorch: error: no command given (ditorch <command> --help)\n"


def test_the_lazy_parser_lists_every_command_and_fills_only_the_chosen_one():
    light = cli.build_parser(None)
    names = list(light._subparsers._group_actions[0].choices)
    assert names == list(cli.COMMAND_NAMES)
    demo = cli.build_parser("demo")._subparsers._group_actions[0].choices
    assert any("--lr" in a.option_strings for a in demo["demo"]._actions)
    assert not any("--top" in a.option_strings for a in demo["profile"]._actions)


def test_the_demo_defaults_and_families_come_without_torch():
    from ditorch import demo, models

    assert (demo.DEFAULT_STEPS, demo.DEFAULT_LR, demo.DEFAULT_MODEL) == (models.DEFAULT_STEPS, models.DEFAULT_LR,
                                                                        models.DEFAULT_MODEL)
    assert models.generate_model_problem("llama") is None
    assert "a vision family" in models.generate_model_problem("internvl")


def test_argument_parser_error_is_one_line(capsys):
    parser = ArgumentParser(prog="ditorch x")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--n", "two"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("ditorch x: error: argument --n: invalid int value: 'two' "
                                       "(see ditorch x --help)\n")


# -- user errors, DITORCH_DEBUG, internal errors, the script's exceptions -----------------------------------------

def _failing_info(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    from ditorch import info

    def run() -> int:
        raise exc

    monkeypatch.setattr(info, "run", run)


def test_a_config_error_is_one_line_exit_2(monkeypatch, capsys):
    _failing_info(monkeypatch, ConfigError("DITORCH_X='y': expected z"))
    assert cli.main(["info"]) == 2
    assert capsys.readouterr().err == "ditorch info: error: DITORCH_X='y': expected z\n"


def test_ditorch_debug_adds_the_traceback(monkeypatch, capsys):
    _failing_info(monkeypatch, ConfigError("DITORCH_X='y': expected z"))
    monkeypatch.setenv("DITORCH_DEBUG", "1")
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in run" in err
    assert err.splitlines()[-1] == "ditorch info: error: DITORCH_X='y': expected z"


def test_an_internal_error_keeps_its_traceback_and_says_so(monkeypatch, capsys):
    _failing_info(monkeypatch, KeyError("adapter"))
    assert cli.main(["info"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "KeyError: 'adapter'" in err
    assert err.splitlines()[-1].startswith("ditorch info: internal error: KeyError in ditorch itself (not in your "
                                           "input or script); please report it")


def test_an_exception_of_the_script_is_reported_as_python_does(tmp_path, capsys):
    script = tmp_path / "crash.py"
    script.write_text("def f():\n    raise ValueError('boom from the script')\n\nf()\n")
    assert cli.main(["run", "--", str(script)]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-1] == "ValueError: boom from the script"
    assert f'File "{script}", line 4, in <module>' in err
    assert "ditorch" not in err.replace(str(tmp_path), "") and "internal error" not in err  # no frame of ours


def test_a_malformed_plugin_setting_is_an_error_not_the_cpu():
    proc = subprocess.run([str(BIN / "ditorch"), "info"], capture_output=True, text=True, timeout=120,
                          env=_clean_env(DROPLET_FAULTS="linear:bias=0.5"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "ditorch info: error: DROPLET_FAULTS entry 'linear:bias=0.5' is malformed: expected "
        "op-pattern:fault[:param] with fault one of bias, noise, nan, noncontig, inplace_lost, grad, slow "
        "(did you mean 'linear:bias:0.5'?)"]


# -- replay: dashed options with upstream's aliases; a path that holds no case --------------------------------------

def test_replay_options_are_dashed_and_upstream_spellings_are_hidden_aliases():
    from op_tools import run_op_from_data

    parser = ArgumentParser(prog="replay")
    run_op_from_data.add_arguments(parser)
    dashed = parser.parse_args(["d", "--run-times", "3", "--only-run-forward", "True", "--results-dir", "r",
                                "--allow-module", "m", "--acc-check", "--sync-time-measure"])
    upstream = parser.parse_args(["d", "--run_times", "3", "--only_run_forward", "True", "--results_dir", "r",
                                  "--allow_module", "m", "--acc_check", "--sync_time_measure"])
    assert vars(dashed) == vars(upstream)
    assert (dashed.run_times, dashed.results_dir, dashed.allow_module) == (3, "r", ["m"])
    help_text = parser.format_help()
    assert "--run-times" in help_text and "--results-dir" in help_text
    assert not [word for word in help_text.split() if word.startswith("--") and "_" in word], help_text


def test_find_cases_never_searches_the_folder_of_a_script(tmp_path):
    from op_tools.replay import find_cases

    case = tmp_path / "cap" / "torch.add" / "1"
    case.mkdir(parents=True)
    (case / "case.json").write_text("{}")
    (tmp_path / "train.py").write_text("")
    assert find_cases(tmp_path / "train.py") == []
    assert find_cases(case / "case.json") == [case]
    assert find_cases(tmp_path) == [case]


# -- apply_feature ------------------------------------------------------------------------------------------------

def test_unknown_feature_is_a_value_error_and_the_assertion_error_upstream_expects():
    import op_tools
    from op_tools.features import UnknownFeatureError

    with pytest.raises(ValueError) as info:
        op_tools.apply_feature("torch.add", feature="fallbak")
    assert isinstance(info.value, AssertionError) and isinstance(info.value, UnknownFeatureError)
    message = str(info.value)
    assert message.startswith("apply_feature: unknown feature 'fallbak' (did you mean 'fallback'?); known: ")
    assert "op_capture" in message and "\n" not in message
    with pytest.raises(AssertionError):
        op_tools.apply_feature(ops=["torch.add"], feature="nothing_like_it")


# -- parity: which run failed, its exit status, its stderr kept -----------------------------------------------------

def test_parity_names_the_failed_run_and_keeps_its_stderr(tmp_path):
    from module_tools.parity import run_parity

    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('to stdout')\nraise RuntimeError('the script failed here')\n")
    said: list[str] = []
    result = run_parity(str(script), out=tmp_path / "out", env=_clean_env(), progress=said.append)
    assert result.status == 2 and result.failed_run == "ref"
    first = result.lines[0]
    assert first.startswith("ditorch parity: the reference run (CPU) failed (exit status 1); its stderr:"), first
    assert "RuntimeError: the script failed here" in first and f'File "{script}", line 3' in first
    assert "parity_run.py" not in first and "runpy" not in first  # the script's traceback, not ours
    assert result.lines[1].endswith(f"(stderr alone: {tmp_path / 'out' / 'ref.stderr.log'})")
    stderr_log = (tmp_path / "out" / "ref.stderr.log").read_text()
    assert "RuntimeError: the script failed here" in stderr_log and "to stdout" not in stderr_log
    assert "to stdout" in (tmp_path / "out" / "ref.log").read_text()
    assert said[0].startswith("ditorch parity: [1/2] the reference run (CPU): 2 steps of ")
    assert said[-1].startswith("ditorch parity: [1/2] the reference run (CPU) failed after ")


# -- conformance from-capture: the printed next command runs as printed ----------------------------------------------

def test_from_capture_prints_a_next_command_that_runs(tmp_path, capsys):
    from op_tools import OpCapture

    x = torch.randn(4, 8, device="dipu", requires_grad=True)
    with OpCapture(results_dir=tmp_path / "cap", run_id="r") as cap:
        y = torch.nn.functional.linear(x, torch.ones(3, 8, device=x.device))
        z = y + torch.arange(3, device=x.device) + y.new_ones(y.shape)  # device arguments recorded as dipu
        z.sum().backward()
    out = tmp_path / "cases dir"
    assert cli.main(["conformance", "from-capture", str(cap.run_dir), str(out)]) == 0
    printed = capsys.readouterr().out
    command = next(line for line in printed.splitlines() if line.startswith("next: ")).removeprefix("next: ")
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"]
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=300,
                          env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL 0" in proc.stdout and "ERROR 0" in proc.stdout, proc.stdout
